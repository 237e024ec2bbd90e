package meta

import (
	"errors"
	"fmt"
)

// Sentinels the typed errors below match with errors.Is.
var (
	// ErrExists: a create named a topic or group that exists already.
	ErrExists = errors.New("meta: already exists")
	// ErrNotFound: a command or read named a topic or group that does not
	// exist.
	ErrNotFound = errors.New("meta: not found")
	// ErrRefused: the state machine refused a command (ResultInvalid).
	ErrRefused = errors.New("meta: command refused")
	// ErrBeingDeleted: a command named a topic an unfinished delete-topic
	// operation is removing (ResultDeleting).
	ErrBeingDeleted = errors.New("meta: topic being deleted")
	// ErrBusy: another admin operation on the topic is unfinished
	// (ResultBusy).
	ErrBusy = errors.New("meta: topic busy with another operation")
	// ErrHandingOver: a topic's partition count cannot change while shards
	// are added (ResultHandingOver).
	ErrHandingOver = errors.New("meta: topic partitions handing over")
	// ErrOverLimit: a create would pass MaxTopics or MaxGroupsPerTopic
	// (ResultOverLimit).
	ErrOverLimit = errors.New("meta: over a cluster limit")
)

// OverLimitError says which cap a create would pass: the cluster's
// topics, or Topic's groups when Group is set.
type OverLimitError struct {
	Topic string
	Group string
}

func (e *OverLimitError) Error() string {
	if e.Group != "" {
		return fmt.Sprintf("group %q not created: topic %q has %d groups, the most a topic holds; delete groups no longer read", e.Group, e.Topic, MaxGroupsPerTopic)
	}
	return fmt.Sprintf("topic %q not created: the cluster holds %d topics, the most it holds; delete topics no longer used", e.Topic, MaxTopics)
}

// Is matches ErrOverLimit.
func (e *OverLimitError) Is(target error) bool { return target == ErrOverLimit }

// HandingOverError says which topic's partitions cannot change yet.
type HandingOverError struct{ Topic string }

func (e *HandingOverError) Error() string {
	return fmt.Sprintf("topic %q cannot change its partition count while shards are being added: "+
		"wait until the new shards serve and every hand-over has closed (shardctl status shows them)", e.Topic)
}

// Is matches ErrHandingOver.
func (e *HandingOverError) Is(target error) bool { return target == ErrHandingOver }

// BeingDeletedError says which topic is being deleted.
type BeingDeletedError struct{ Topic string }

func (e *BeingDeletedError) Error() string {
	return fmt.Sprintf("topic %q is being deleted: try again once the deletion is done", e.Topic)
}

// Is matches ErrBeingDeleted.
func (e *BeingDeletedError) Is(target error) bool { return target == ErrBeingDeleted }

// BusyError says which topic another admin operation is changing.
type BusyError struct{ Topic string }

func (e *BusyError) Error() string {
	return fmt.Sprintf("another operation on topic %q is unfinished", e.Topic)
}

// Is matches ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// ExistsError says which topic, or group of a topic, exists already.
type ExistsError struct {
	Topic string
	Group string // empty: the topic itself
}

func (e *ExistsError) Error() string {
	if e.Group != "" {
		return fmt.Sprintf("group %q of topic %q already exists", e.Group, e.Topic)
	}
	return fmt.Sprintf("topic %q already exists", e.Topic)
}

// Is matches ErrExists.
func (e *ExistsError) Is(target error) bool { return target == ErrExists }

// NotFoundError says which topic, or group of a topic, does not exist.
type NotFoundError struct {
	Topic string
	Group string // empty: the topic itself
}

func (e *NotFoundError) Error() string {
	if e.Group != "" {
		return fmt.Sprintf("group %q of topic %q does not exist", e.Group, e.Topic)
	}
	return fmt.Sprintf("topic %q does not exist", e.Topic)
}

// Is matches ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ResultError is the error the result code of applying c means: nil for
// ResultOK and ResultNoop (an IfNotExists create of something that
// exists), an *ExistsError or *NotFoundError naming c's topic and group,
// a *BeingDeletedError, *BusyError or *HandingOverError naming c's
// topic, or ErrRefused.
func ResultError(c *Command, code uint64) error {
	topic, group := c.Name, c.Group
	if c.Topic != nil {
		topic = c.Topic.Name
	}
	creates := c.Op == OpCreateGroup
	if c.Op == OpSubmitAdmin && len(c.Operations) == 1 {
		topic, group = c.Operations[0].Topic, c.Operations[0].Group
		creates = c.Operations[0].Kind == OpKindCreateGroup
	}
	switch code {
	case ResultOK, ResultNoop:
		return nil
	case ResultExists:
		return &ExistsError{Topic: topic, Group: group}
	case ResultDeleting:
		return &BeingDeletedError{Topic: topic}
	case ResultBusy:
		return &BusyError{Topic: topic}
	case ResultHandingOver:
		return &HandingOverError{Topic: topic}
	case ResultOverLimit:
		if !creates {
			group = "" // a topic create names groups it would have
		}
		return &OverLimitError{Topic: topic, Group: group}
	case ResultNotFound:
		if creates {
			group = "" // a create names a group to add: its topic is missing
		}
		return &NotFoundError{Topic: topic, Group: group}
	case ResultInvalid:
		return fmt.Errorf("%w: %s", ErrRefused, c.Op)
	}
	return fmt.Errorf("%w: %s answered unknown result %d", ErrRefused, c.Op, code)
}
