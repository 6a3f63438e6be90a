package console

import (
	"crypto/subtle"
	"sync"
)

// signInKey is the key in the URL `kubectl agentrun console` prints. It
// opens the console once: whoever reads the URL later (another browser,
// another user on the machine, the shell history) gets nothing from it.
type signInKey struct {
	value string

	mu    sync.Mutex
	spent bool
}

// keyCheck is what presenting a key yields.
type keyCheck int

const (
	// keyWrong is not this console's key.
	keyWrong keyCheck = iota
	// keySpent is the key, already used by an earlier sign-in.
	keySpent
	// keyTaken is the key, now taken by this request: sign it in, or
	// give the key back if that fails.
	keyTaken
)

func newSignInKey() *signInKey { return &signInKey{value: randomKey()} }

// take spends the key if presented is it and it is unspent. Two requests
// racing with the key cannot both take it.
func (k *signInKey) take(presented string) keyCheck {
	if subtle.ConstantTimeCompare([]byte(presented), []byte(k.value)) != 1 {
		return keyWrong
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.spent {
		return keySpent
	}
	k.spent = true
	return keyTaken
}

// giveBack unspends the key after a sign-in that failed (the API server
// refused the kubeconfig's credentials): no session was made with it.
func (k *signInKey) giveBack() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.spent = false
}
