package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

const (
	componentJournal  = "journal"
	componentSnapshot = "blueprint-snapshot"
	componentOutput   = "output"
	// labelRunUID ties owned objects to one run (a UID fits a label value;
	// a run name may not).
	labelRunUID = "agentrun.dev/run-uid"
	journalKey  = "entry"
)

// journalStore keeps each run's journal: one immutable, owned ConfigMap per
// entry (one small create per entry, nothing rewritten), and an in-memory
// copy so a reconcile does not list them again. After a restart the copy is
// empty and the journal is read back from the API server once.
type journalStore struct {
	writer client.Client
	reader client.Reader

	mu      sync.Mutex
	entries map[types.UID][]journal.Entry
}

func newJournalStore(w client.Client, r client.Reader) *journalStore {
	return &journalStore{writer: w, reader: r, entries: map[types.UID][]journal.Entry{}}
}

// Load returns the run's entries in seq order.
func (s *journalStore) Load(ctx context.Context, run *arv1.AgentRun) ([]journal.Entry, error) {
	s.mu.Lock()
	cached, ok := s.entries[run.UID]
	s.mu.Unlock()
	if ok {
		return cached, nil
	}
	var list corev1.ConfigMapList
	if err := s.reader.List(ctx, &list, client.InNamespace(run.Namespace),
		client.MatchingLabels{labelRunUID: string(run.UID), arv1.LabelComponent: componentJournal}); err != nil {
		return nil, fmt.Errorf("reading the journal: %w", err)
	}
	out := make([]journal.Entry, 0, len(list.Items))
	for i := range list.Items {
		e, err := decodeEntry(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.entries[run.UID]; ok { // appended meanwhile
		return cur, nil
	}
	s.entries[run.UID] = out
	return out, nil
}

// Append writes one entry. Its name is derived from the run and seq, so a
// retried write after a lost response finds the stored entry instead of
// writing twice.
func (s *journalStore) Append(ctx context.Context, run *arv1.AgentRun, e journal.Entry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ownedName(run, fmt.Sprintf("j%06d", e.Seq)),
			Namespace: run.Namespace,
			Labels: map[string]string{
				labelRunUID:         string(run.UID),
				arv1.LabelComponent: componentJournal,
			},
			OwnerReferences: []metav1.OwnerReference{ownerRef(run)},
		},
		Immutable: ptr.To(true),
		Data:      map[string]string{journalKey: string(data)},
	}
	if err := s.writer.Create(ctx, cm); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("journaling %s #%d: %w", e.Kind, e.Seq, err)
		}
		if err := s.reader.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			return err
		}
		if e, err = decodeEntry(cm); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.entries[run.UID]
	if !ok {
		return nil // next Load reads it from the API server
	}
	for _, c := range cur {
		if c.Seq == e.Seq {
			return nil
		}
	}
	next := append(append([]journal.Entry(nil), cur...), e)
	sort.Slice(next, func(i, j int) bool { return next[i].Seq < next[j].Seq })
	s.entries[run.UID] = next
	return nil
}

// Forget drops the in-memory copy of a deleted run.
func (s *journalStore) Forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, uid)
}

func decodeEntry(cm *corev1.ConfigMap) (journal.Entry, error) {
	var e journal.Entry
	if err := json.Unmarshal([]byte(cm.Data[journalKey]), &e); err != nil {
		return e, fmt.Errorf("journal entry %s is corrupt: %w", cm.Name, err)
	}
	return e, nil
}

// ownedName names an object the run owns: "<run>-<suffix>", or
// "<uid>-<suffix>" when the run's name is too long for that.
func ownedName(run *arv1.AgentRun, suffix string) string {
	if n := run.Name + "-" + suffix; len(n) <= 253 {
		return n
	}
	return string(run.UID) + "-" + suffix
}

func ownerRef(run *arv1.AgentRun) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         arv1.GroupVersion.String(),
		Kind:               "AgentRun",
		Name:               run.Name,
		UID:                run.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

func ownedBy(obj metav1.Object, run *arv1.AgentRun) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == run.UID {
			return true
		}
	}
	return false
}
