package a2aserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/a2aproject/a2a-go/a2a"
)

// maxRequest bounds a JSON-RPC request body: a run's task is at most
// maxTask bytes, and an answer's input is of the same order.
const maxRequest = 4 << 20

// rpcRequest is the JSON-RPC envelope, read before the SDK's transport
// sees the request: the SDK answers params it cannot decode as a parse
// error (-32700), where JSON-RPC says invalid params (-32602), and every
// method must first find its agent exposed.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	ID      any             `json:"id"`
}

// paramsOf is a value of the params type of each A2A method.
var paramsOf = map[string]func() any{
	"message/send":                        func() any { return &a2a.MessageSendParams{} },
	"message/stream":                      func() any { return &a2a.MessageSendParams{} },
	"tasks/get":                           func() any { return &a2a.TaskQueryParams{} },
	"tasks/cancel":                        func() any { return &a2a.TaskIDParams{} },
	"tasks/resubscribe":                   func() any { return &a2a.TaskIDParams{} },
	"tasks/pushNotificationConfig/get":    func() any { return &a2a.GetTaskPushConfigParams{} },
	"tasks/pushNotificationConfig/list":   func() any { return &a2a.ListTaskPushConfigParams{} },
	"tasks/pushNotificationConfig/set":    func() any { return &a2a.TaskPushConfig{} },
	"tasks/pushNotificationConfig/delete": func() any { return &a2a.DeleteTaskPushConfigParams{} },
}

// streaming methods answer in Server-Sent Events, errors included.
func streaming(method string) bool {
	return method == "message/stream" || method == "tasks/resubscribe"
}

// readRequest reads the body and, when it is a JSON-RPC envelope, returns
// it (nil when it is not JSON: the SDK answers that with a parse error).
// The body is put back for the SDK.
func readRequest(w http.ResponseWriter, r *http.Request) (*rpcRequest, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequest))
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req rpcRequest
	if json.Unmarshal(body, &req) != nil {
		return nil, nil
	}
	return &req, nil
}

// checkParams refuses params that do not decode into the method's type
// (a string where an object is due, a part of no known kind, none at all).
func checkParams(req *rpcRequest) error {
	newParams, ok := paramsOf[req.Method]
	if !ok {
		return nil // not an A2A method: the SDK answers method not found
	}
	if len(req.Params) == 0 || string(req.Params) == "null" {
		return fmt.Errorf("%s needs params: %w", req.Method, a2a.ErrInvalidParams)
	}
	if err := json.Unmarshal(req.Params, newParams()); err != nil {
		return fmt.Errorf("the params of %s do not have its shape: %v: %w", req.Method, err, a2a.ErrInvalidParams)
	}
	return nil
}

// rpcCodes are the JSON-RPC codes the A2A specification gives the errors
// this file answers with.
var rpcCodes = []struct {
	err  error
	code int
}{
	{a2a.ErrInvalidParams, -32602},
	{a2a.ErrTaskNotFound, -32001},
	{a2a.ErrUnsupportedOperation, -32004},
	{a2a.ErrServerError, -32000},
}

type rpcErrorObject struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

// writeRPCError answers req with err as the SDK would: a JSON-RPC error
// object whose data.error is the whole story, in HTTP 200, as one
// Server-Sent Event for a streaming method.
func writeRPCError(w http.ResponseWriter, req *rpcRequest, err error) {
	e := rpcErrorObject{Code: -32603, Message: "internal error", Data: map[string]any{"error": err.Error()}}
	for _, c := range rpcCodes {
		if errors.Is(err, c.err) {
			e.Code, e.Message = c.code, c.err.Error()
			break
		}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": e})
	if !streaming(req.Method) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
}
