package fsm

import (
	"bytes"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// getter reads one key: a pebble.Reader, or a bodyIter.
type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

// bodyIter reads the bodies of one command's refs (a lease's items, an
// ack's receipts) through one iterator on the run's batch, opened as the
// command starts. A Get per body builds a new iterator over every level of
// the store; a lease or ack of a burst names its messages in id order, the
// bodies' key order, so the one iterator steps forward from each read to
// the next instead.
//
// The iterator sees the batch as the command found it, not the command's
// own writes: it is used only for commands whose refs name distinct
// messages, in increasing id order (bodiesOf), so no ref reads a body an
// earlier ref of the command wrote. Everything else (copy records,
// counters, key records) is read through the batch.
type bodyIter struct{ it *pebble.Iterator }

// bodiesOf opens a bodyIter for a command whose n refs name messages
// id(0) < id(1) < … ; nil, to read through the batch, for any other.
func (a *applier) bodiesOf(n int, id func(int) []byte) (*bodyIter, error) {
	if n < 2 {
		return nil, nil
	}
	for i := 1; i < n; i++ {
		if bytes.Compare(id(i-1), id(i)) >= 0 {
			return nil, nil
		}
	}
	prefix := keys.MessagePrefix(a.shard)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	return &bodyIter{it: it}, nil
}

// Get answers key's value as the batch held it when the iterator opened,
// valid until the next Get; pebble.ErrNotFound if there is none.
func (b *bodyIter) Get(key []byte) ([]byte, io.Closer, error) {
	// The comparer's prefix of a key is the whole key: this finds the key
	// or nothing, and uses the tables' bloom filters as a Get does.
	if !b.it.SeekPrefixGE(key) {
		if err := b.it.Error(); err != nil {
			return nil, nil, err
		}
		return nil, nil, pebble.ErrNotFound
	}
	v, err := b.it.ValueAndErr()
	if err != nil {
		return nil, nil, err
	}
	return v, noClose{}, nil
}

// close closes b's iterator; a nil b has none.
func (b *bodyIter) close() error {
	if b == nil {
		return nil
	}
	return b.it.Close()
}

type noClose struct{}

func (noClose) Close() error { return nil }
