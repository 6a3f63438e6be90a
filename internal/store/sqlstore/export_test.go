package sqlstore

// SetBeforeCommit makes every transaction of s call fn before it commits.
func SetBeforeCommit(s *Store, fn func()) { s.beforeCommit = fn }
