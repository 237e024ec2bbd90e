package fanout

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Errors of listing pages.
var (
	ErrBadToken        = errors.New("fanout: malformed page token")
	ErrShortCursors    = errors.New("fanout: shard answered a different number of cursors than messages")
	ErrCursorsBackward = errors.New("fanout: shard answered cursors out of order")
)

// Token is the state of a message listing between pages, opaque to the
// client: per shard, the cursor of the last message already returned, and
// the shards with nothing more to list. It also carries what it was issued
// for, so a token is refused for another query or after the topic's
// partitions moved to other shards (cursors are per shard).
type Token struct {
	// RoutingVersion is the routing version the token was issued under
	// (for operators reading a token; not checked).
	RoutingVersion uint64 `json:"v,omitempty"`
	// Placement is the topic's placement fingerprint when issued.
	Placement uint64 `json:"p"`
	// Query is QueryHash of the request it was issued for.
	Query uint64 `json:"q"`
	// After maps a shard to the cursor of the last message returned from
	// it; a shard not in After starts at the beginning.
	After map[uint64][]byte `json:"a,omitempty"`
	// Done lists the shards already listed to the end, ascending.
	Done []uint64 `json:"d,omitempty"`
}

// Encode is the token's client-facing form: URL-safe base64 of JSON.
func (t Token) Encode() string {
	b, _ := json.Marshal(t) // a struct of ints, maps of ints to bytes: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeToken parses a token made by Encode.
func DecodeToken(s string) (Token, error) {
	var t Token
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, fmt.Errorf("%w: not base64", ErrBadToken)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	return t, nil
}

// IsDone reports whether shard was listed to the end.
func (t Token) IsDone(shard uint64) bool {
	_, ok := slices.BinarySearch(t.Done, shard)
	return ok
}

// QueryHash identifies the filter of a listing (everything but the page
// size and token), so a token is used only with the query it came from.
func QueryHash(req *sundialv1.ListMessagesRequest) uint64 {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(req.GetTopic())
	str(req.GetGroup())
	b = binary.BigEndian.AppendUint64(b, uint64(req.GetFromUnixMs()))
	b = binary.BigEndian.AppendUint64(b, uint64(req.GetToUnixMs()))
	str(req.GetKeyPrefix())
	str(req.GetHeaderKey())
	str(req.GetHeaderValue())
	return xxhash.Sum64(b)
}

// ShardPage is one shard's answer to a page request of Requested
// messages after the token's cursor for it.
type ShardPage struct {
	Shard     uint64
	Requested int
	Messages  []*sundialv1.MessageInfo
	Cursors   [][]byte
}

// MergePages merges the shards' pages into one page of at most pageSize
// messages in listing order (cursor bytes, ties by shard id), and returns
// the token for the next page and whether there is one. A shard is done
// when it answered fewer messages than requested and all of them made the
// page; the listing ends when every shard is done. prev is the token the
// pages were requested with (the zero Token for the first page); pages
// must cover every shard of the topic not done in prev.
func MergePages(prev Token, pages []ShardPage, pageSize int) ([]*sundialv1.MessageInfo, Token, bool, error) {
	type item struct {
		cursor []byte
		shard  uint64
		msg    *sundialv1.MessageInfo
	}
	var items []item
	for _, p := range pages {
		if len(p.Cursors) != len(p.Messages) {
			return nil, Token{}, false, fmt.Errorf("%w: shard %d, %d cursors for %d messages", ErrShortCursors, p.Shard, len(p.Cursors), len(p.Messages))
		}
		for i, m := range p.Messages {
			if i > 0 && bytes.Compare(p.Cursors[i-1], p.Cursors[i]) >= 0 {
				return nil, Token{}, false, fmt.Errorf("%w: shard %d at %d", ErrCursorsBackward, p.Shard, i)
			}
			items = append(items, item{cursor: p.Cursors[i], shard: p.Shard, msg: m})
		}
	}
	slices.SortStableFunc(items, func(a, b item) int {
		if c := bytes.Compare(a.cursor, b.cursor); c != 0 {
			return c
		}
		switch {
		case a.shard < b.shard:
			return -1
		case a.shard > b.shard:
			return 1
		}
		return 0
	})
	if len(items) > pageSize {
		items = items[:pageSize]
	}
	next := Token{
		RoutingVersion: prev.RoutingVersion,
		Placement:      prev.Placement,
		Query:          prev.Query,
		After:          make(map[uint64][]byte),
		Done:           slices.Clone(prev.Done),
	}
	for s, c := range prev.After {
		next.After[s] = c
	}
	taken := make(map[uint64]int)
	out := make([]*sundialv1.MessageInfo, 0, len(items))
	for _, it := range items {
		out = append(out, it.msg)
		next.After[it.shard] = it.cursor
		taken[it.shard]++
	}
	more := false
	for _, p := range pages {
		if len(p.Messages) < p.Requested && taken[p.Shard] == len(p.Messages) {
			if !next.IsDone(p.Shard) {
				next.Done = append(next.Done, p.Shard)
				slices.Sort(next.Done)
			}
			delete(next.After, p.Shard)
			continue
		}
		more = true
	}
	if len(next.After) == 0 {
		next.After = nil
	}
	return out, next, more, nil
}
