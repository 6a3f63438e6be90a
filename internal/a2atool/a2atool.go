// Package a2atool calls a remote A2A agent as one tool, with the A2A Go
// SDK's client over the HTTP client it is given (the manager's egress
// policy's). "Listing" the tool reads the agent's card, so an agent that
// cannot be reached, or that the egress policy refuses, is known before
// any call, as an MCP server is.
package a2atool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
)

// InputSchema is what the model passes: the message to send.
var InputSchema = json.RawMessage(`{"type":"object","properties":{"message":{"type":"string","description":"The task or question for the agent, in plain words."}},"required":["message"]}`)

// List reads the agent card at s.URL (<url>/.well-known/agent-card.json)
// and returns the one tool the agent is, named s.Name and described by
// the card (a blueprint's description replaces it in the offer). An A2A
// agent may do anything, so its effect is write (a blueprint's
// [tools.<name>] effect overrides it).
func List(ctx context.Context, hc *http.Client, s mcptool.Server) ([]mcptool.Tool, error) {
	card, err := resolve(ctx, hc, s)
	if err != nil {
		return nil, err
	}
	return []mcptool.Tool{{Server: s.Name, Name: s.Name, Description: describe(card), InputSchema: InputSchema, Effect: mcptool.EffectWrite}}, nil
}

func describe(card *a2a.AgentCard) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Send a task to the A2A agent %q: %s", card.Name, card.Description)
	for _, sk := range card.Skills {
		fmt.Fprintf(&b, "\n- %s: %s", sk.Name, sk.Description)
	}
	return b.String()
}

func resolve(ctx context.Context, hc *http.Client, s mcptool.Server) (*a2a.AgentCard, error) {
	var opts []agentcard.ResolveOption
	if s.Token != "" {
		opts = append(opts, agentcard.WithRequestHeader("Authorization", "Bearer "+s.Token))
	}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, s.URL, opts...)
	if err != nil {
		status := 0
		var bad *agentcard.ErrStatusNotOK
		if errors.As(err, &bad) {
			status = bad.StatusCode
		}
		return nil, mcptool.NewCallError(true, status, fmt.Sprintf("reading the agent card of %s: %s", s.URL, message(err)), err)
	}
	return card, nil
}

// message is err's text; an egress refusal says so in its own words.
func message(err error) string {
	var r *egress.Refusal
	if errors.As(err, &r) {
		return r.Error()
	}
	return err.Error()
}

// Call sends the model's message to the agent (message/send, blocking)
// and returns its answer: a completed task's artifacts (else its status
// message), or the agent's reply message. A task that failed, was
// rejected or canceled, or asks for input or authentication, is a tool
// error saying so: the run's model decides what to do next.
func Call(ctx context.Context, hc *http.Client, s mcptool.Server, args json.RawMessage) (mcptool.Result, error) {
	var in struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(args, &in); err != nil || strings.TrimSpace(in.Message) == "" {
		return mcptool.Result{Text: `the call needs {"message": "..."} with the task for the agent`, IsError: true}, nil
	}
	card, err := resolve(ctx, hc, s)
	if err != nil {
		return mcptool.Result{}, err
	}
	opts := []a2aclient.FactoryOption{a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(hc)}
	if s.Token != "" {
		opts = append(opts, a2aclient.WithInterceptors(bearer(s.Token)))
	}
	c, err := a2aclient.NewFromCard(ctx, card, opts...)
	if err != nil {
		return mcptool.Result{}, mcptool.NewCallError(true, 0, fmt.Sprintf("agent %s: %v", s.URL, err), err)
	}
	res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: in.Message})})
	if err != nil {
		var r *egress.Refusal
		return mcptool.Result{}, mcptool.NewCallError(errors.As(err, &r), 0, fmt.Sprintf("agent %s: %s", card.URL, message(err)), err)
	}
	return resultOf(res), nil
}

func resultOf(res a2a.SendMessageResult) mcptool.Result {
	switch v := res.(type) {
	case *a2a.Message:
		return mcptool.Result{Text: partsText(v.Parts)}
	case *a2a.Task:
		status := ""
		if v.Status.Message != nil {
			status = partsText(v.Status.Message.Parts)
		}
		if v.Status.State != a2a.TaskStateCompleted {
			return mcptool.Result{Text: fmt.Sprintf("the agent's task %s is %s: %s", v.ID, v.Status.State, status), IsError: true}
		}
		var out []string
		for _, a := range v.Artifacts {
			out = append(out, partsText(a.Parts))
		}
		if len(out) == 0 {
			out = append(out, status)
		}
		return mcptool.Result{Text: strings.Join(out, "\n")}
	}
	return mcptool.Result{Text: "the agent answered nothing", IsError: true}
}

func partsText(parts a2a.ContentParts) string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case a2a.TextPart:
			out = append(out, v.Text)
		case a2a.DataPart:
			if b, err := json.Marshal(v.Data); err == nil {
				out = append(out, string(b))
			}
		case a2a.FilePart:
			if u, ok := v.File.(a2a.FileURI); ok {
				out = append(out, u.URI)
			}
		}
	}
	return strings.Join(out, "\n")
}

// bearer sends the agent's token with every call.
type bearer string

func (b bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	req.Meta["Authorization"] = []string{"Bearer " + string(b)}
	return ctx, nil
}

func (b bearer) After(context.Context, *a2aclient.Response) error { return nil }
