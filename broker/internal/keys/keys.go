// Package keys encodes the Pebble keys of event-shard state. Every key starts
// with the shard prefix, so one shard's state is one contiguous key range
// (snapshots stream it, removal deletes it) in the Pebble DB shared by all
// shards of a broker.
//
// Layout, after the 9-byte shard prefix ('s', shard id big-endian):
//
//		'a'                                      applied Raft index
//		'm' <msg id 16>                          message body (StoredMessage), with
//		                                         the copy state of a one-copy message
//		'c' <msg id 16> <group>                  one group's copy state (CopyState)
//		                                         of a message of several copies
//		'd' <topic> 0 <part 4> <group> 0 <visible_at 8> <prio 4> <msg id 16>
//		                                         due index; value: attempt (4)
//		'g' <topic> 0 <group>                    groups of a topic on this shard
//		'r' <request id>                         publish or change dedup record
//		'q' <applied_at 8> <request id>          dedup records by age
//		'k' <topic> 0 <key>                      key record (KeyRecord)
//		'e' <msg id 16>                          how a message ended (EndRecord)
//		'v' <forget_at 8> <kind> <rest>          key and end records by expiry; the
//		                                         end records one Raft entry wrote with
//		                                         one forget time share entries of up
//		                                         to 256 ids
//		'x' <expires_at 8> <msg id 16>           messages by TTL expiry
//		'n' <topic> 0 <group>                    a group's counters
//		'f' <topic> 0 <part 4> <group> 0 <fairness key> 0 <visible_at 8> <prio 4> <msg id 16>
//		                                         fair index (FAIR topics); value as 'd'
//		'h' <topic> 0 <part 4>                   hand-over fence: keyed publishes of
//		                                         the partition are refused (fsm.Fence)
//		'b'                                      change journal state (JournalState)
//		'j' <index 8> <key without prefix>       change journal: key written or
//	                                        deleted by the entry at index
//		'w'                                      restore in progress (RestoreState)
//
// The applied index, the journal and the restore marker are bookkeeping of
// the replica, not the shard's contents: a backup leaves them out
// (Bookkeeping) and a restore never writes them.
//
// One key per shard lives outside the shard's range, so that deleting or
// replacing the range leaves it alone and snapshots never carry it:
//
//	'R' <shard 8>                            snapshot recovery in progress
//
// and one key per DB, outside every range:
//
//	'F'                                      format version (4, big-endian)
//
// A message stored with one copy (its topic had one group on the shard, as
// most do, or a redriven dead letter) keeps that copy's state in its body
// (StoredMessage.inline_group, format 2): it is two keys, 'm' and 'd'. A
// publish writes both, a lease deletes and writes 'd' and rewrites 'm', an
// ack deletes both. A message stored with several copies has a 'c' per
// group beside its body, and so has every message written in format 1;
// fsm.ReadCopy reads both forms.
//
// The due-index value is the copy's attempt (4 bytes) and a flag byte,
// 1 when the entry is a lease deadline.
// Topic and group names never contain a zero byte (their charset excludes
// it), so the zero separators keep prefixes unambiguous. Integers are
// big-endian so byte order is numeric order; the priority is offset by 2^31
// so lower priorities sort first, negatives included.
package keys

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrMalformed is returned when a stored key does not parse.
var ErrMalformed = errors.New("keys: malformed key")

const (
	tagApplied = 'a'
	tagMessage = 'm'
	tagCopy    = 'c'
	tagDue     = 'd'
	tagGroup   = 'g'
	tagDedup   = 'r'
	tagDedupAt = 'q'
	tagKey     = 'k'
	tagEnd     = 'e'
	tagForget  = 'v'
	tagExpiry  = 'x'
	tagCounter = 'n'
	tagFair    = 'f'
	tagFence   = 'h'

	tagJournalState = 'b'
	tagJournal      = 'j'
	tagRestoring    = 'w'
)

// Kinds of records in the forget index. A ForgetKey or ForgetEnd entry's
// rest is the tail of the one record it forgets (Tail). A ForgetEnds entry
// (format 2) forgets end records one Raft entry wrote with that forget
// time: its rest is the entry's index (8) and, when written in parts of at
// most 256 ids, the part's number (4); its value the message ids.
const (
	ForgetKey  byte = 'k'
	ForgetEnd  byte = 'e'
	ForgetEnds byte = 'E'
)

// IDBytes is the length of a message id.
const IDBytes = 16

// ShardPrefix is the first key of a shard's range.
func ShardPrefix(shard uint64) []byte {
	b := make([]byte, 9, 64)
	b[0] = 's'
	binary.BigEndian.PutUint64(b[1:], shard)
	return b
}

// ShardEnd is the first key after a shard's range.
func ShardEnd(shard uint64) []byte {
	return ShardPrefix(shard + 1)
}

// Applied is the key of the shard's applied index.
func Applied(shard uint64) []byte {
	return append(ShardPrefix(shard), tagApplied)
}

// Message is the key of a message body.
func Message(shard uint64, id []byte) []byte {
	return append(append(ShardPrefix(shard), tagMessage), id...)
}

// MessagePrefix starts every message body key of a shard.
func MessagePrefix(shard uint64) []byte {
	return append(ShardPrefix(shard), tagMessage)
}

// Copy is the key of one group's copy state of a message.
func Copy(shard uint64, id []byte, group string) []byte {
	return append(append(append(ShardPrefix(shard), tagCopy), id...), group...)
}

// Group is the key registering group on topic.
func Group(shard uint64, topic, group string) []byte {
	b := append(append(ShardPrefix(shard), tagGroup), topic...)
	return append(append(b, 0), group...)
}

// GroupPrefix is the prefix of every group key of topic.
func GroupPrefix(shard uint64, topic string) []byte {
	return append(append(append(ShardPrefix(shard), tagGroup), topic...), 0)
}

// GroupFromKey returns the group name of a key made by Group.
func GroupFromKey(shard uint64, topic string, key []byte) string {
	return string(key[len(GroupPrefix(shard, topic)):])
}

// Dedup is the key of a publish or change request's dedup record (one
// space of request ids: the record says which kind it answers).
func Dedup(shard uint64, requestID string) []byte {
	return append(append(ShardPrefix(shard), tagDedup), requestID...)
}

// DedupAt indexes a dedup record by the time it was applied.
func DedupAt(shard uint64, appliedAtMs int64, requestID string) []byte {
	b := append(ShardPrefix(shard), tagDedupAt)
	b = binary.BigEndian.AppendUint64(b, uint64(appliedAtMs))
	return append(b, requestID...)
}

// DedupAtRange bounds the dedup records applied before beforeMs.
func DedupAtRange(shard uint64, beforeMs int64) (lower, upper []byte) {
	lower = append(ShardPrefix(shard), tagDedupAt)
	upper = binary.BigEndian.AppendUint64(append(ShardPrefix(shard), tagDedupAt), uint64(beforeMs))
	return lower, upper
}

// DedupRequestID returns the request id inside a DedupAt key.
func DedupRequestID(key []byte) string {
	return string(key[9+1+8:])
}

// Queue names one due index: the copies of one group on one partition of a
// topic.
type Queue struct {
	Topic     string
	Partition uint32
	Group     string
}

// QueuePrefix is the prefix of every due-index key of q.
func QueuePrefix(shard uint64, q Queue) []byte {
	b := append(append(ShardPrefix(shard), tagDue), q.Topic...)
	b = binary.BigEndian.AppendUint32(append(b, 0), q.Partition)
	return append(append(b, q.Group...), 0)
}

// Due is a due-index key: copy id of q becomes visible at visibleAtMs.
func Due(shard uint64, q Queue, visibleAtMs int64, priority int32, id []byte) []byte {
	b := QueuePrefix(shard, q)
	b = binary.BigEndian.AppendUint64(b, uint64(visibleAtMs))
	b = binary.BigEndian.AppendUint32(b, uint32(int64(priority)-math.MinInt32))
	return append(b, id...)
}

// DueFrom is the first key of q's entries visible at or after fromMs.
func DueFrom(shard uint64, q Queue, fromMs int64) []byte {
	return binary.BigEndian.AppendUint64(QueuePrefix(shard, q), uint64(fromMs))
}

// DueUntil is the upper bound (exclusive) of the entries of q visible at or
// before nowMs.
func DueUntil(shard uint64, q Queue, nowMs int64) []byte {
	return binary.BigEndian.AppendUint64(QueuePrefix(shard, q), uint64(nowMs)+1)
}

// DueEntry is a parsed due-index key.
type DueEntry struct {
	VisibleAtMs int64
	Priority    int32
	ID          []byte
}

// ParseDue parses a key of q made by Due.
func ParseDue(shard uint64, q Queue, key []byte) (DueEntry, error) {
	prefix := QueuePrefix(shard, q)
	if len(key) != len(prefix)+8+4+IDBytes || string(key[:len(prefix)]) != string(prefix) {
		return DueEntry{}, fmt.Errorf("%w: due key of %d bytes", ErrMalformed, len(key))
	}
	rest := key[len(prefix):]
	return DueEntry{
		VisibleAtMs: int64(binary.BigEndian.Uint64(rest[0:8])),
		Priority:    int32(int64(binary.BigEndian.Uint32(rest[8:12])) + math.MinInt32),
		ID:          rest[12:],
	}, nil
}

// PrefixEnd is the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// CopyPrefix is the prefix of every group's copy state of a message.
func CopyPrefix(shard uint64, id []byte) []byte {
	return append(append(ShardPrefix(shard), tagCopy), id...)
}

// GroupOfCopy returns the group of a key made by Copy.
func GroupOfCopy(key []byte) string {
	return string(key[9+1+IDBytes:])
}

// DuePrefix starts every due-index entry of shard.
func DuePrefix(shard uint64) []byte {
	return append(ShardPrefix(shard), tagDue)
}

// TopicOfDue is the topic a due-index key of shard names.
func TopicOfDue(shard uint64, key []byte) (string, error) {
	prefix := DuePrefix(shard)
	if len(key) <= len(prefix) || string(key[:len(prefix)]) != string(prefix) {
		return "", fmt.Errorf("%w: due key", ErrMalformed)
	}
	rest := key[len(prefix):]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return "", fmt.Errorf("%w: due key without a topic", ErrMalformed)
	}
	return string(rest[:i]), nil
}

// TopicDuePrefix is the prefix of every due-index key of topic, all
// partitions and groups.
func TopicDuePrefix(shard uint64, topic string) []byte {
	return append(append(append(ShardPrefix(shard), tagDue), topic...), 0)
}

// PartitionDuePrefix is the prefix of every due-index key of one partition
// of topic, all groups.
func PartitionDuePrefix(shard uint64, topic string, partition uint32) []byte {
	return binary.BigEndian.AppendUint32(TopicDuePrefix(shard, topic), partition)
}

// PartitionOfTopicDue returns the partition of a due-index key under
// TopicDuePrefix(shard, topic).
func PartitionOfTopicDue(shard uint64, topic string, key []byte) (uint32, error) {
	prefix := TopicDuePrefix(shard, topic)
	if len(key) < len(prefix)+4 || string(key[:len(prefix)]) != string(prefix) {
		return 0, fmt.Errorf("%w: topic due key", ErrMalformed)
	}
	return binary.BigEndian.Uint32(key[len(prefix):]), nil
}

// ParseTopicDue parses a due-index key under TopicDuePrefix(shard, topic).
func ParseTopicDue(shard uint64, topic string, key []byte) (Queue, DueEntry, error) {
	prefix := TopicDuePrefix(shard, topic)
	rest := key[len(prefix):]
	if len(key) < len(prefix)+4+1+8+4+IDBytes || string(key[:len(prefix)]) != string(prefix) {
		return Queue{}, DueEntry{}, fmt.Errorf("%w: topic due key", ErrMalformed)
	}
	q := Queue{Topic: topic, Partition: binary.BigEndian.Uint32(rest[:4])}
	groupEnd := len(rest) - (8 + 4 + IDBytes) - 1
	if groupEnd < 4 || rest[groupEnd] != 0 {
		return Queue{}, DueEntry{}, fmt.Errorf("%w: topic due key group", ErrMalformed)
	}
	q.Group = string(rest[4:groupEnd])
	e, err := ParseDue(shard, q, key)
	return q, e, err
}

// DueValue encodes a due-index value.
func DueValue(attempt uint32, leased bool) []byte {
	v := binary.BigEndian.AppendUint32(make([]byte, 0, 5), attempt)
	if leased {
		return append(v, 1)
	}
	return append(v, 0)
}

// ParseDueValue decodes a value made by DueValue.
func ParseDueValue(v []byte) (attempt uint32, leased bool, err error) {
	if len(v) != 5 {
		return 0, false, fmt.Errorf("%w: due value of %d bytes", ErrMalformed, len(v))
	}
	return binary.BigEndian.Uint32(v[:4]), v[4] == 1, nil
}

// Key is the key record of a topic's message key.
func Key(shard uint64, topic, key string) []byte {
	b := append(append(ShardPrefix(shard), tagKey), topic...)
	return append(append(b, 0), key...)
}

// KeyPrefix is the prefix of the key records of topic whose key starts
// with prefix.
func KeyPrefix(shard uint64, topic, prefix string) []byte {
	return Key(shard, topic, prefix)
}

// KeyOfRecord returns the message key inside a key made by Key.
func KeyOfRecord(shard uint64, topic string, k []byte) string {
	return string(k[len(Key(shard, topic, "")):])
}

// End is the end record of a message.
func End(shard uint64, id []byte) []byte {
	return append(append(ShardPrefix(shard), tagEnd), id...)
}

// Forget indexes a key or end record by the time it may be forgotten;
// rest is the record's key after the shard prefix and tag.
func Forget(shard uint64, atMs int64, kind byte, rest []byte) []byte {
	b := append(ShardPrefix(shard), tagForget)
	b = binary.BigEndian.AppendUint64(b, uint64(atMs))
	return append(append(b, kind), rest...)
}

// ForgetUntil bounds the forget index up to and including nowMs: the
// records whose time to be forgotten came.
func ForgetUntil(shard uint64, nowMs int64) (lower, upper []byte) {
	lower = append(ShardPrefix(shard), tagForget)
	upper = binary.BigEndian.AppendUint64(append(ShardPrefix(shard), tagForget), uint64(nowMs)+1)
	return lower, upper
}

// ParseForget splits a forget-index key into its time, kind and rest.
func ParseForget(key []byte) (atMs int64, kind byte, rest []byte, err error) {
	if len(key) < 9+1+8+1 {
		return 0, 0, nil, fmt.Errorf("%w: forget key", ErrMalformed)
	}
	return int64(binary.BigEndian.Uint64(key[10:18])), key[18], key[19:], nil
}

// Expiry indexes a message by the time its TTL ends.
func Expiry(shard uint64, atMs int64, id []byte) []byte {
	b := append(ShardPrefix(shard), tagExpiry)
	b = binary.BigEndian.AppendUint64(b, uint64(atMs))
	return append(b, id...)
}

// ExpiryRange bounds the TTL index up to and including nowMs.
func ExpiryRange(shard uint64, nowMs int64) (lower, upper []byte) {
	lower = append(ShardPrefix(shard), tagExpiry)
	upper = binary.BigEndian.AppendUint64(append(ShardPrefix(shard), tagExpiry), uint64(nowMs)+1)
	return lower, upper
}

// ExpiryPrefix is the prefix of the whole TTL index.
func ExpiryPrefix(shard uint64) []byte {
	return append(ShardPrefix(shard), tagExpiry)
}

// ParseExpiry splits a TTL-index key.
func ParseExpiry(key []byte) (atMs int64, id []byte, err error) {
	if len(key) != 9+1+8+IDBytes {
		return 0, nil, fmt.Errorf("%w: expiry key", ErrMalformed)
	}
	return int64(binary.BigEndian.Uint64(key[10:18])), key[18:], nil
}

// Counter is the key of a group's counters on a topic.
func Counter(shard uint64, topic, group string) []byte {
	b := append(append(ShardPrefix(shard), tagCounter), topic...)
	return append(append(b, 0), group...)
}

// CounterPrefix is the prefix of every counter of topic.
func CounterPrefix(shard uint64, topic string) []byte {
	return append(append(append(ShardPrefix(shard), tagCounter), topic...), 0)
}

// Fence is the hand-over fence of partition of topic (a base topic name).
func Fence(shard uint64, topic string, partition uint32) []byte {
	return binary.BigEndian.AppendUint32(FencePrefix(shard, topic), partition)
}

// FencePrefix is the prefix of the hand-over fences of topic.
func FencePrefix(shard uint64, topic string) []byte {
	return append(append(append(ShardPrefix(shard), tagFence), topic...), 0)
}

// PrefixLen is the length of a shard prefix.
const PrefixLen = 9

// JournalState is the key of the shard's change-journal state.
func JournalState(shard uint64) []byte {
	return append(ShardPrefix(shard), tagJournalState)
}

// Journal is the journal entry saying the Raft entry at index wrote or
// deleted key (a key of shard).
func Journal(shard, index uint64, key []byte) []byte {
	b := binary.BigEndian.AppendUint64(append(ShardPrefix(shard), tagJournal), index)
	return append(b, key[PrefixLen:]...)
}

// JournalThrough bounds the journal entries of indexes up to and including
// index: [JournalPrefix, JournalThrough(index)).
func JournalThrough(shard, index uint64) []byte {
	return binary.BigEndian.AppendUint64(append(ShardPrefix(shard), tagJournal), index+1)
}

// JournalPrefix starts every journal entry of a shard.
func JournalPrefix(shard uint64) []byte {
	return append(ShardPrefix(shard), tagJournal)
}

// JournaledKey is the key (without the shard prefix) a journal entry
// names.
func JournaledKey(entry []byte) []byte { return entry[PrefixLen+1+8:] }

// Restoring is the key of the shard's restore-in-progress marker.
func Restoring(shard uint64) []byte {
	return append(ShardPrefix(shard), tagRestoring)
}

// Bookkeeping says whether rel, a key without its shard prefix, is the
// replica's bookkeeping (applied index, journal, restore marker) rather
// than shard contents.
func Bookkeeping(rel []byte) bool {
	if len(rel) == 0 {
		return true
	}
	switch rel[0] {
	case tagApplied, tagJournalState, tagJournal, tagRestoring:
		return true
	}
	return false
}

// IsMessage says whether rel, a key without its shard prefix, is a message
// body's.
func IsMessage(rel []byte) bool { return len(rel) == 1+IDBytes && rel[0] == tagMessage }

// Tail is a key without its shard prefix and tag: the rest a forget-index
// entry stores.
func Tail(key []byte) []byte { return key[10:] }

// FromTail rebuilds a key of the given tag from its tail.
func FromTail(shard uint64, tag byte, tail []byte) []byte {
	return append(append(ShardPrefix(shard), tag), tail...)
}

// Tags of the records a forget-index entry can point at.
const (
	TagKey = tagKey
	TagEnd = tagEnd
)

// FairPrefix is the prefix of the fair index of q.
func FairPrefix(shard uint64, q Queue) []byte {
	b := append(append(ShardPrefix(shard), tagFair), q.Topic...)
	b = binary.BigEndian.AppendUint32(append(b, 0), q.Partition)
	return append(append(b, q.Group...), 0)
}

// PartitionFairPrefix is the prefix of the fair-index keys of one
// partition of topic, all groups.
func PartitionFairPrefix(shard uint64, topic string, partition uint32) []byte {
	b := append(append(ShardPrefix(shard), tagFair), topic...)
	return binary.BigEndian.AppendUint32(append(b, 0), partition)
}

// FairKeyPrefix is the prefix of one fairness key's entries in q.
func FairKeyPrefix(shard uint64, q Queue, fairnessKey string) []byte {
	return append(append(FairPrefix(shard, q), fairnessKey...), 0)
}

// FairUntil is the upper bound (exclusive) of one fairness key's entries in
// q visible at or before nowMs.
func FairUntil(shard uint64, q Queue, fairnessKey string, nowMs int64) []byte {
	return binary.BigEndian.AppendUint64(FairKeyPrefix(shard, q, fairnessKey), uint64(nowMs)+1)
}

// Fair is a fair-index key.
func Fair(shard uint64, q Queue, fairnessKey string, visibleAtMs int64, priority int32, id []byte) []byte {
	b := FairKeyPrefix(shard, q, fairnessKey)
	b = binary.BigEndian.AppendUint64(b, uint64(visibleAtMs))
	b = binary.BigEndian.AppendUint32(b, uint32(int64(priority)-math.MinInt32))
	return append(b, id...)
}

// ParseFair parses a key made by Fair into its fairness key and entry.
func ParseFair(shard uint64, q Queue, key []byte) (string, DueEntry, error) {
	prefix := FairPrefix(shard, q)
	tail := 1 + 8 + 4 + IDBytes
	if len(key) < len(prefix)+tail || string(key[:len(prefix)]) != string(prefix) || key[len(key)-tail] != 0 {
		return "", DueEntry{}, fmt.Errorf("%w: fair key", ErrMalformed)
	}
	rest := key[len(key)-tail+1:]
	return string(key[len(prefix) : len(key)-tail]), DueEntry{
		VisibleAtMs: int64(binary.BigEndian.Uint64(rest[0:8])),
		Priority:    int32(int64(binary.BigEndian.Uint32(rest[8:12])) + math.MinInt32),
		ID:          rest[12:],
	}, nil
}

// Recovering is the marker of a snapshot recovery in progress on shard: set
// (synced) before the first chunk of a snapshot is written and deleted with
// the last, so a shard that has it holds a half-recovered range. It lies
// outside every shard range.
func Recovering(shard uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{'R'}, shard)
}

// FormatVersion is the version of the layout above and of the records in
// broker/internal/fsm/fsmpb, as this binary writes them: stored in the DB
// under Format and at the head of every shard snapshot. Raise it with a
// change an older broker cannot read, and register a migration from the
// previous version in package store. Version 1 is the layout of the data
// dirs made before the version was recorded; version 2 keeps the copy state
// of a one-copy message inside its body.
const FormatVersion uint32 = 2

// OldestReadableFormat is the oldest format this binary reads as it is, in
// a data dir or a snapshot: format 2 reads format-1 records (every copy a
// 'c' record) unchanged, so a format-1 data dir needs no rewrite and a
// format-1 replica's snapshot is taken.
const OldestReadableFormat uint32 = 1

// Format is the key of the DB's format version. It lies outside every shard
// range.
func Format() []byte { return []byte{'F'} }
