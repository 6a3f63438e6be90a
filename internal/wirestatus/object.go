package wirestatus

import (
	"bytes"
	"encoding/json"
)

// Field is one key of an Object.
type Field struct {
	Key   string
	Value any
}

// Object is a JSON object whose keys marshal in the order they were given,
// so "state" (or "kind") always leads and a person reading the JSON sees the
// discriminator first. A nil Object marshals as {}, never null.
type Object []Field

// MarshalJSON writes the fields in order.
func (o Object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(f.Key)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// Get returns the value of key and whether it is present.
func (o Object) Get(key string) (any, bool) {
	for _, f := range o {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// String returns the value of key when it is a string, else "".
func (o Object) String(key string) string {
	v, _ := o.Get(key)
	s, _ := v.(string)
	return s
}

// Keys lists the keys in order.
func (o Object) Keys() []string {
	keys := make([]string, len(o))
	for i, f := range o {
		keys[i] = f.Key
	}
	return keys
}
