package journal

// delivered records the sub-agent whose result a completion delivered:
// the seeds' Koda rule, a result is handed to the model once.
func (st *State) delivered(e *Entry) {
	if e.Child == "" || e.IsError {
		return
	}
	st.deliver(e.Child)
}

func (st *State) deliver(child string) {
	if st.Delivered == nil {
		st.Delivered = map[string]bool{}
	}
	st.Delivered[child] = true
}

// drained takes in a sub-agent's result the drain delivered, once per
// sub-agent (a result wait_for_agent delivered is not shown again): like a
// message, before the stage's first answer it is shown with the task, after
// it as what followed the last answer.
func (st *State) drained(e *Entry) {
	if e.Child == "" || st.Delivered[e.Child] {
		return
	}
	st.deliver(e.Child)
	if n := len(st.Turns); n > 0 {
		st.Turns[n-1].Notices = append(st.Turns[n-1].Notices, e.Text)
		return
	}
	st.Notices = append(st.Notices, e.Text)
}

// receive takes in a message from the parent, once per id: before the
// stage's first answer it joins the stage's inbox (shown with the task),
// after it, the last answer's turn (shown as what followed that answer).
func (st *State) receive(e *Entry) {
	if e.MessageID == "" || st.Received[e.MessageID] {
		return
	}
	if st.Received == nil {
		st.Received = map[string]bool{}
	}
	st.Received[e.MessageID] = true
	if n := len(st.Turns); n > 0 {
		st.Turns[n-1].Messages = append(st.Turns[n-1].Messages, e.Text)
		return
	}
	st.Inbox = append(st.Inbox, e.Text)
}
