// Package configmaps keeps runs' journals in the API server (the default
// store, where no database is configured). A run's journal is
// a few ConfigMaps ("chunks", usually one), each holding many entries under
// their zero-padded seq, so a run costs one object, not one per entry.
// Entries are added by updates of the whole chunk that carry its
// resourceVersion: a writer that no longer owns the run (another replica
// took it over) fails on the conflict instead of overwriting. An in-memory
// copy per active run means a reconcile never reads its journal back.
package configmaps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Labels and names of journal objects.
const (
	// Component is the agentrun.dev/component label of journal chunks.
	Component = "journal"
	// LabelRunUID ties owned objects to one run (a UID fits a label value;
	// a run name may not).
	LabelRunUID = "agentrun.dev/run-uid"
	// LabelChunk is a chunk's index within its run's journal.
	LabelChunk = "agentrun.dev/chunk"
	// legacyKey is the one data key of a journal entry written as its own
	// ConfigMap by versions before chunks.
	legacyKey = "entry"
	// OutputKey holds a finished run's final output in its first chunk, so
	// a finished run leaves one object behind, not two.
	OutputKey = "output"
)

// DefaultChunkBytes bounds a chunk's data. Every append rewrites its whole
// chunk (the API server and etcd store the object, not the change), so a
// long run pays for its last chunk's size on every step: appending one
// entry to a nearly full 512 KiB chunk cost the API server, etcd and the
// writer 50-60 ms of CPU and put half a megabyte into etcd's history,
// against about 17 ms and 128 KB for a full chunk of this size
// (BenchmarkWriteCosts). A short run's journal fits one chunk either way;
// a longer one leaves a chunk per 128 KiB. An entry larger than a chunk
// gets one of its own (a ConfigMap holds up to 1 MiB).
const DefaultChunkBytes = 128 << 10

// MinChunkBytes and MaxChunkBytes bound Store.ChunkBytes: smaller chunks
// would multiply a long run's objects, larger ones leave too little of a
// ConfigMap's 1 MiB for a large entry and the final output beside them.
const (
	MinChunkBytes = 16 << 10
	MaxChunkBytes = 512 << 10
)

// refusal returns err marked store.ErrRefused when the API server refused
// the write for good, and err itself otherwise.
func refusal(err error) error {
	switch {
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsRequestEntityTooLargeError(err), apierrors.IsBadRequest(err):
		return &refusedError{err: err}
	}
	return err
}

// refusedError is a write the API server refused for good: it is
// store.ErrRefused, and the API server's answer.
type refusedError struct{ err error }

func (e *refusedError) Error() string {
	return "the API server refuses the run's journal write: " + e.err.Error()
}

func (e *refusedError) Unwrap() []error { return []error{store.ErrRefused, e.err} }

// Store keeps journals. The zero value is not usable; use New.
type Store struct {
	writer client.Client
	reader client.Reader
	// ChunkBytes bounds a chunk's data (DefaultChunkBytes when 0).
	ChunkBytes int

	logs *store.Logs[runLog]
}

// runLog is one run's journal as this process knows it: the entries
// (store.Log) and the chunks holding them.
type runLog struct {
	store.Log
	chunks []chunk
	// output is the final output stored with the journal, and the chunk
	// holding it.
	output      string
	outputChunk int
	hasOutput   bool
}

type chunk struct {
	bytes int
	// obj is the chunk as last stored, without its managed fields (the API
	// server keeps them when an update carries none): an append sends it
	// whole with the new keys (put).
	obj *corev1.ConfigMap
}

func (c chunk) name() string { return c.obj.Name }

// New makes a store writing with w and reading uncached with r.
func New(w client.Client, r client.Reader) *Store {
	return &Store{writer: w, reader: r, logs: store.NewLogs(func(mustRead bool) *runLog {
		return &runLog{Log: store.Log{MustRead: mustRead, Raw: map[int64]string{}}}
	}, func(l *runLog) *store.Log { return &l.Log })}
}

// Load returns the run's entries in seq order. empty says the run cannot
// have a journal yet (its status was never written), so nothing is read.
func (s *Store) Load(ctx context.Context, run *arv1.AgentRun, empty bool) ([]journal.Entry, error) {
	return s.logs.Load(run.UID, func(l *runLog) error { return s.ensureLoaded(ctx, run, l, empty) })
}

func (s *Store) ensureLoaded(ctx context.Context, run *arv1.AgentRun, l *runLog, empty bool) error {
	if l.Loaded {
		return nil
	}
	if !empty || l.MustRead {
		entries, chunks, raw, out, err := readAll(ctx, s.reader, run.Namespace, run.UID)
		if err == nil {
			err = store.ShorterThanStatus(run, entries, ChunkName(run, 0))
		}
		if err != nil {
			return err
		}
		l.Entries, l.chunks, l.Raw = entries, chunks, raw
		l.output, l.outputChunk, l.hasOutput = out.text, out.chunk, out.ok
	}
	l.Loaded, l.MustRead = true, false
	return nil
}

// Append journals entries in one write, after the run's last entry. A
// retried append whose earlier attempt was stored is recognised and
// succeeds; an entry whose seq holds other content is store.ErrSeqTaken, and the
// in-memory copy is dropped so the next Load reads the journal afresh.
func (s *Store) Append(ctx context.Context, run *arv1.AgentRun, es ...journal.Entry) error {
	return s.append(ctx, run, nil, es)
}

// AppendWithOutput is Append that also stores output as the run's final
// output in the same write: a call whose answer completes the run carries
// the output that would otherwise cost a write of its own (PutOutput then
// finds it stored).
func (s *Store) AppendWithOutput(ctx context.Context, run *arv1.AgentRun, output string, es ...journal.Entry) error {
	return s.append(ctx, run, &output, es)
}

func (s *Store) append(ctx context.Context, run *arv1.AgentRun, output *string, es []journal.Entry) error {
	load := func(l *runLog) error { return s.ensureLoaded(ctx, run, l, false) }
	return s.logs.Append(run.UID, load, es, func(l *runLog, plan []store.Planned) error {
		add := map[string]string{}
		size := 0
		for _, p := range plan {
			add[key(p.Entry.Seq)] = p.Text
			size += len(p.Text) + 8
		}
		if output != nil {
			add[OutputKey] = *output
		}
		c, err := s.write(ctx, run, l, add, size)
		if errors.Is(err, store.ErrSeqTaken) {
			return fmt.Errorf("journaling %s #%d: %w", plan[0].Entry.Kind, plan[0].Entry.Seq, store.ErrSeqTaken)
		}
		if err != nil {
			return refusal(err)
		}
		if output != nil {
			l.output, l.outputChunk, l.hasOutput = *output, c, true
		}
		l.chunks[c].bytes += size
		return nil
	})
}

// write stores add in the last chunk, or in a new one when it would
// overflow, and returns the chunk's index.
func (s *Store) write(ctx context.Context, run *arv1.AgentRun, l *runLog, add map[string]string, size int) (int, error) {
	limit := s.ChunkBytes
	if limit <= 0 {
		limit = DefaultChunkBytes
	}
	if n := len(l.chunks); n > 0 && (l.chunks[n-1].bytes+size <= limit || l.chunks[n-1].bytes == 0) {
		if err := s.put(ctx, &l.chunks[n-1], add); err != nil {
			return 0, err
		}
		return n - 1, nil
	}
	i := len(l.chunks)
	cm := chunkObject(run, i, add)
	if err := s.writer.Create(ctx, cm); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("creating journal chunk %s: %w", cm.Name, err)
		}
		// A create whose response was lost, or another writer's: ours only
		// if it holds exactly what we wrote.
		if err := s.reader.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			return 0, err
		}
		if !holds(cm.Data, add) {
			return 0, store.ErrSeqTaken
		}
	}
	l.chunks = append(l.chunks, chunk{obj: keptChunk(cm)})
	return i, nil
}

// put adds keys to a chunk by an update of the whole chunk under its
// resourceVersion. An update, not a merge patch: the API server applies a
// patch by encoding the stored object as JSON, merging and decoding it
// again, about 0.6 ms of its CPU per append that an update (sent as
// protobuf) does not cost; the resourceVersion fences both alike. On a
// conflict the chunk is read back: if it already holds exactly these keys
// an earlier attempt was stored; otherwise somebody else wrote the journal.
func (s *Store) put(ctx context.Context, c *chunk, add map[string]string) error {
	cm := c.obj.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	for k, v := range add {
		cm.Data[k] = v
	}
	sent := cm.Data
	err := s.writer.Update(ctx, cm)
	if err == nil {
		// The answer decodes into fresh strings: keep the ones sent, which
		// the run's raw entries share, so a journal is held once.
		cm.Data = sent
		c.obj = keptChunk(cm)
		return nil
	}
	if !apierrors.IsConflict(err) {
		return fmt.Errorf("appending to journal chunk %s: %w", c.name(), err)
	}
	if err := s.reader.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		return err
	}
	if holds(cm.Data, add) {
		c.obj = keptChunk(cm)
		return nil
	}
	return store.ErrSeqTaken
}

// keptChunk is cm as a chunk keeps it: without its managed fields.
func keptChunk(cm *corev1.ConfigMap) *corev1.ConfigMap {
	cm.ManagedFields = nil
	return cm
}

func holds(data, add map[string]string) bool {
	for k, v := range add {
		if data[k] != v {
			return false
		}
	}
	return true
}

// PutOutput stores a finished run's final output in its journal's first
// chunk and returns that object's name. A retried write of the same text
// succeeds.
func (s *Store) PutOutput(ctx context.Context, run *arv1.AgentRun, text string) (string, error) {
	l := s.logs.Get(run.UID)
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if err := s.ensureLoaded(ctx, run, l, false); err != nil {
		return "", err
	}
	if l.hasOutput && l.output == text {
		return l.chunks[l.outputChunk].name(), nil // stored with the answer
	}
	add := map[string]string{OutputKey: text}
	if len(l.chunks) == 0 {
		cm := chunkObject(run, 0, add)
		if err := s.writer.Create(ctx, cm); client.IgnoreAlreadyExists(err) != nil {
			return "", fmt.Errorf("storing the final output: %w", refusal(err))
		}
		s.logs.Forget(run.UID) // read back whatever is there next time
		return cm.Name, nil
	}
	i := len(l.chunks) - 1
	if l.hasOutput {
		i = l.outputChunk // one output per journal
	}
	c := &l.chunks[i]
	if err := s.put(ctx, c, add); err != nil {
		return "", fmt.Errorf("storing the final output: %w", refusal(err))
	}
	l.output, l.outputChunk, l.hasOutput = text, i, true
	return c.name(), nil
}

// Forget drops the in-memory copy of a run (finished, deleted, or stale).
func (s *Store) Forget(uid types.UID) { s.logs.Forget(uid) }

// Has reports whether the run's journal is held in memory.
func (s *Store) Has(uid types.UID) bool { return s.logs.Has(uid) }

// EachRun calls fn with every run whose journal is held in memory.
func (s *Store) EachRun(fn func(types.UID)) { s.logs.EachRun(fn) }

// Cached reports how many runs' journals are held in memory.
func (s *Store) Cached() int { return s.logs.Cached() }

// ChunkName names chunk i of a run's journal.
func ChunkName(run *arv1.AgentRun, i int) string {
	if i == 0 {
		return run.OwnedName(Component)
	}
	return run.OwnedName(fmt.Sprintf("%s-%d", Component, i))
}

func chunkObject(run *arv1.AgentRun, i int, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ChunkName(run, i),
			Namespace: run.Namespace,
			Labels: map[string]string{
				LabelRunUID:         string(run.UID),
				arv1.LabelComponent: Component,
				LabelChunk:          strconv.Itoa(i),
			},
			OwnerReferences: []metav1.OwnerReference{run.OwnerReference()},
		},
		Data: data,
	}
}

func key(seq int64) string { return fmt.Sprintf("%06d", seq) }

// Read returns a run's journal as stored, in seq order, for readers other
// than the controller (the kubectl plugin, tests). It reads chunks and the
// one-entry objects of older versions alike.
func Read(ctx context.Context, r client.Reader, namespace string, uid types.UID) ([]journal.Entry, error) {
	entries, _, _, err := read(ctx, r, namespace, uid)
	return entries, err
}

// ReadLenient is Read for people: an entry that does not decode is
// reported ("<object> <key>: <why>") instead of failing the whole read.
func ReadLenient(ctx context.Context, r client.Reader, namespace string, uid types.UID) ([]journal.Entry, []string, error) {
	list, err := list(ctx, r, namespace, uid)
	if err != nil {
		return nil, nil, err
	}
	var entries []journal.Entry
	var bad []string
	for i := range list.Items {
		es, b := DecodeChunk(&list.Items[i])
		entries, bad = append(entries, es...), append(bad, b...)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	return entries, bad, nil
}

// DecodeChunk reads the entries one journal object holds, in key order,
// leniently: an entry that does not decode is described in bad instead.
// For readers following a journal through a watch of its objects.
func DecodeChunk(cm *corev1.ConfigMap) (entries []journal.Entry, bad []string) {
	for _, k := range sortedKeys(cm.Data) {
		if k == OutputKey {
			continue
		}
		e, err := decode(cm.Name, cm.Data[k])
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s %s: unreadable entry: %v", cm.Name, k, err))
			continue
		}
		entries = append(entries, e)
	}
	return entries, bad
}

// Selector selects the objects of a run's journal, for a list or a watch.
func Selector(uid types.UID) client.MatchingLabels {
	return client.MatchingLabels{LabelRunUID: string(uid), arv1.LabelComponent: Component}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func list(ctx context.Context, r client.Reader, ns string, uid types.UID) (*corev1.ConfigMapList, error) {
	var list corev1.ConfigMapList
	if err := r.List(ctx, &list, client.InNamespace(ns), Selector(uid)); err != nil {
		return nil, fmt.Errorf("reading the journal: %w", err)
	}
	return &list, nil
}

func read(ctx context.Context, r client.Reader, ns string, uid types.UID) ([]journal.Entry, []chunk, map[int64]string, error) {
	entries, chunks, raw, _, err := readAll(ctx, r, ns, uid)
	return entries, chunks, raw, err
}

// stored is a final output found in a chunk.
type stored struct {
	text  string
	chunk int
	ok    bool
}

func readAll(ctx context.Context, r client.Reader, ns string, uid types.UID) ([]journal.Entry, []chunk, map[int64]string, stored, error) {
	var out stored
	list, err := list(ctx, r, ns, uid)
	if err != nil {
		return nil, nil, nil, out, err
	}
	var entries []journal.Entry
	raw := map[int64]string{}
	byIndex := map[int]chunk{}
	legacy := false
	for i := range list.Items {
		cm := &list.Items[i]
		if v, ok := cm.Data[legacyKey]; ok && cm.Labels[LabelChunk] == "" {
			e, err := decodeEntry(cm.Name, legacyKey, v)
			if err != nil {
				return nil, nil, nil, out, err
			}
			entries = append(entries, e)
			raw[e.Seq] = v
			legacy = true
			continue
		}
		idx, err := strconv.Atoi(cm.Labels[LabelChunk])
		if err != nil || idx < 0 {
			return nil, nil, nil, out, &store.CorruptError{Object: cm.Name, Problem: fmt.Sprintf("the chunk has no valid %s label", LabelChunk)}
		}
		c := chunk{obj: keptChunk(cm)}
		for _, k := range sortedKeys(cm.Data) {
			v := cm.Data[k]
			if k == OutputKey {
				out = stored{text: v, chunk: idx, ok: true}
				continue
			}
			e, err := decodeEntry(cm.Name, k, v)
			if err != nil {
				return nil, nil, nil, out, err
			}
			entries = append(entries, e)
			raw[e.Seq] = v
			c.bytes += len(v) + 8
		}
		byIndex[idx] = c
	}
	chunks, err := inOrder(byIndex)
	if err != nil {
		return nil, nil, nil, out, err
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	if !legacy && len(chunks) > 0 {
		if err := store.Dense(entries, chunks[0].name()); err != nil {
			return nil, nil, nil, out, err
		}
	}
	return entries, chunks, raw, out, nil
}

// inOrder lists the chunks by index: a chunk missing before the last one
// found is lost journal, not a journal that ends there.
func inOrder(byIndex map[int]chunk) ([]chunk, error) {
	last := -1
	for i := range byIndex {
		last = max(last, i)
	}
	chunks := make([]chunk, last+1)
	for i := range chunks {
		c, ok := byIndex[i]
		if !ok {
			return nil, &store.CorruptError{Object: siblingName(byIndex[last].name(), last, i), Problem: fmt.Sprintf("chunk %d is missing while chunk %d (%s) exists", i, last, byIndex[last].name())}
		}
		chunks[i] = c
	}
	return chunks, nil
}

// siblingName is the name of chunk i of the journal whose chunk last is
// called name (ChunkName's pattern), or "chunk i" when name does not
// follow it.
func siblingName(name string, last, i int) string {
	suffix := "-" + Component
	if last > 0 {
		suffix += "-" + strconv.Itoa(last)
	}
	base, ok := strings.CutSuffix(name, suffix)
	switch {
	case !ok:
		return fmt.Sprintf("chunk %d", i)
	case i == 0:
		return base + "-" + Component
	}
	return fmt.Sprintf("%s-%s-%d", base, Component, i)
}

// decodeEntry decodes one stored entry. What is wrong is said without the
// stored text (it may hold a tool's output or a prompt).
func decodeEntry(name, k, v string) (journal.Entry, error) {
	var e journal.Entry
	err := json.Unmarshal([]byte(v), &e)
	if err == nil && k != legacyKey && k != key(e.Seq) {
		return e, &store.CorruptError{Object: name, Key: k, Problem: fmt.Sprintf("the entry stored under this key says it is seq %d", e.Seq)}
	}
	if err == nil {
		return e, nil
	}
	problem := "the entry does not decode as a journal entry"
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		problem = fmt.Sprintf("the entry is not valid JSON (at byte %d of %d)", syn.Offset, len(v))
	case errors.As(err, &typ):
		problem = fmt.Sprintf("the entry does not decode: field %q cannot hold a JSON %s", typ.Field, typ.Value)
	}
	return e, &store.CorruptError{Object: name, Key: k, Problem: problem}
}

func decode(name, v string) (journal.Entry, error) {
	var e journal.Entry
	if err := json.Unmarshal([]byte(v), &e); err != nil {
		return e, fmt.Errorf("journal %s is corrupt: %w", name, err)
	}
	return e, nil
}

var _ store.Backend = (*Store)(nil)

// Kind names the backend.
func (s *Store) Kind() string { return "configmaps" }

// Check reports nothing wrong: the API server the manager needs anyway is
// this store, and its readiness is the manager's own.
func (s *Store) Check(context.Context) error { return nil }

// Close has nothing to release.
func (s *Store) Close() error { return nil }

// Entries reads a run's journal as stored.
func (s *Store) Entries(ctx context.Context, run store.RunRef) ([]journal.Entry, error) {
	return Read(ctx, s.reader, run.Namespace, run.UID)
}

// Output reads a run's final output from the ConfigMap status names, or
// else its journal's first chunk.
func (s *Store) Output(ctx context.Context, run store.RunRef) (string, bool, error) {
	name := run.OutputObject
	if name == "" {
		ref := &arv1.AgentRun{}
		ref.Name, ref.UID = run.Name, run.UID
		name = ChunkName(ref, 0)
	}
	var cm corev1.ConfigMap
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: name}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, err
	}
	text, ok := cm.Data[OutputKey]
	return text, ok, nil
}
