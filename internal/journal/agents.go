package journal

// delivered records the sub-agent whose result a completion delivered:
// the seeds' Koda rule, a result is handed to the model once.
func (st *State) delivered(e *Entry) {
	if e.Child == "" || e.IsError {
		return
	}
	if st.Delivered == nil {
		st.Delivered = map[string]bool{}
	}
	st.Delivered[e.Child] = true
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
