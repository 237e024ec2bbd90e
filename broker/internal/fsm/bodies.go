package fsm

import (
	"bytes"
	"errors"
	"io"
	"slices"

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
// the store; a lease of a burst names its messages in id order, the
// bodies' key order, so the one iterator steps forward from each read to
// the next instead. An ack's receipts come in the order consumers acked:
// for those bodiesOf reads every body first, in id order, and keeps them.
//
// The iterator sees the batch as the command found it, not the command's
// own writes: it is used only for commands whose refs name distinct
// messages (bodiesOf), so no ref reads a body an earlier ref of the
// command wrote. Everything else (copy records, counters, key records) is
// read through the batch.
type bodyIter struct {
	it *pebble.Iterator
	// read, if not nil, holds every body of the command by key, read
	// before the command wrote anything; Get answers from it alone.
	read map[string][]byte
}

// bodiesOf opens a bodyIter for a command whose n refs name distinct
// messages id(0), id(1), …; nil, to read through the batch, if two refs
// name one message.
func (a *applier) bodiesOf(n int, id func(int) []byte) (*bodyIter, error) {
	if n < 2 {
		return nil, nil
	}
	var order []int // the refs in id order, if they are not in it
	for i := 1; i < n && order == nil; i++ {
		if bytes.Compare(id(i-1), id(i)) >= 0 {
			order = make([]int, n)
			for j := range order {
				order[j] = j
			}
			slices.SortFunc(order, func(x, y int) int { return bytes.Compare(id(x), id(y)) })
			for j := 1; j < n; j++ {
				if bytes.Equal(id(order[j-1]), id(order[j])) {
					return nil, nil
				}
			}
		}
	}
	prefix := keys.MessagePrefix(a.shard)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	b := &bodyIter{it: it}
	if order == nil {
		return b, nil
	}
	read := make(map[string][]byte, n)
	for _, i := range order {
		key := keys.Message(a.shard, id(i))
		v, _, err := b.Get(key)
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return nil, errors.Join(err, it.Close())
		default:
			read[string(key)] = slices.Clone(v)
		}
	}
	b.read = read
	return b, nil
}

// Get answers key's value as the batch held it when the iterator opened,
// valid until the next Get; pebble.ErrNotFound if there is none.
func (b *bodyIter) Get(key []byte) ([]byte, io.Closer, error) {
	if b.read != nil {
		v, ok := b.read[string(key)]
		if !ok {
			return nil, nil, pebble.ErrNotFound
		}
		return v, noClose{}, nil
	}
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
