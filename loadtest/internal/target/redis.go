package target

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proc"
)

// claimScript atomically claims up to ARGV[2] messages for a consumer:
// first those whose lease in the processing set expired, then due members
// of the delayed set, which it moves to the processing set with a lease of
// ARGV[3] ms from ARGV[1] (now, unix ms). The reply's first element is the
// score of the next pending message when nothing was claimed ("" when
// something was or the queue is empty), then the claimed members.
const claimScript = `
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local out = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
if #out < limit then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit - #out)
  if #due > 0 then
    redis.call('ZREM', KEYS[1], unpack(due))
    for _, m in ipairs(due) do out[#out + 1] = m end
  end
end
local lease = now + tonumber(ARGV[3])
for _, m in ipairs(out) do redis.call('ZADD', KEYS[2], lease, m) end
local next = ''
if #out == 0 then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #first > 0 then next = first[2] end
end
table.insert(out, 1, next)
return out
`

// redisLeaseMs is the visibility timeout of a claimed message.
const redisLeaseMs = 30_000

// maxIdlePoll bounds a consumer's sleep when the queue is empty or the next
// message is far off, so new earlier messages are seen soon.
const maxIdlePoll = 50 * time.Millisecond

// redisQueue is the usual Redis delayed queue: a sorted set scored by due
// time (ms) holding the messages, a processing sorted set scored by lease
// deadline, a Lua claim script and ZREM as the ack. A batch is one ZADD.
type redisQueue struct {
	peerServer
	rdb             *redis.Client
	delayed, inproc string
	claim           *redis.Script
}

func startRedis(ctx context.Context, spec Spec, opts Options) (Instance, error) {
	path, err := spec.BinaryPath()
	if err != nil {
		return nil, err
	}
	fsync := "always"
	if spec.Name == "redis-everysec" {
		fsync = "everysec"
	}
	dir := filepath.Join(opts.Dir, spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := splitHostPort(addr)
	q := &redisQueue{
		peerServer: peerServer{name: "redis-server", path: path, dir: dir, log: "redis",
			args: []string{"--bind", "127.0.0.1", "--port", port, "--dir", dir, "--appendonly", "yes",
				"--appendfsync", fsync, "--save", "", "--daemonize", "no", "--protected-mode", "no", "--logfile", ""}},
		delayed: opts.queue() + ":delayed", inproc: opts.queue() + ":processing",
		claim: redis.NewScript(claimScript),
	}
	if err := q.start(); err != nil {
		return nil, err
	}
	q.rdb = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, MaxRetries: 0, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	if err := q.waitReady(ctx); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// waitReady waits up to 120s until redis-server answers a ping.
func (q *redisQueue) waitReady(ctx context.Context) error {
	return q.peerServer.waitReady(ctx, 120*time.Second, func(ctx context.Context) error {
		return q.rdb.Ping(ctx).Err()
	})
}

func (q *redisQueue) Publish(ctx context.Context, msgs []scenario.Message) error {
	zs := make([]redis.Z, len(msgs))
	for i, m := range msgs {
		zs[i] = redis.Z{Score: float64(m.Due.UnixMilli()), Member: m.Payload}
	}
	return q.rdb.ZAdd(ctx, q.delayed, zs...).Err()
}

func (q *redisQueue) Consume(ctx context.Context, opts scenario.ConsumeOptions, handle func(scenario.Delivery)) error {
	return runWorkers(opts.Workers, func() error { return q.consumeWorker(ctx, max(1, opts.Prefetch), handle) })
}

func (q *redisQueue) consumeWorker(ctx context.Context, prefetch int, handle func(scenario.Delivery)) error {
	keys := []string{q.delayed, q.inproc}
	for ctx.Err() == nil {
		now := time.Now()
		res, err := q.claim.Run(ctx, q.rdb, keys, now.UnixMilli(), prefetch, redisLeaseMs).StringSlice()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("target: redis claim: %w", err)
		}
		recv := time.Now()
		if len(res) <= 1 {
			wait := maxIdlePoll
			if len(res) == 1 && res[0] != "" {
				if next, err := strconv.ParseFloat(res[0], 64); err == nil {
					wait = min(wait, max(time.Until(time.UnixMilli(int64(next))), 0))
				}
			}
			pause(ctx, max(wait, 200*time.Microsecond))
			continue
		}
		members := make([]any, 0, len(res)-1)
		for _, m := range res[1:] {
			members = append(members, m)
		}
		if err := q.rdb.ZRem(ctx, q.inproc, members...).Err(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("target: redis ack: %w", err)
		}
		for _, m := range res[1:] {
			handle(scenario.Delivery{Payload: []byte(m), Received: recv})
		}
	}
	return nil
}

func (q *redisQueue) Restart(ctx context.Context) (time.Time, error) {
	return q.restart(ctx, q.waitReady)
}

func (q *redisQueue) Close() error {
	var errs []error
	if q.rdb != nil {
		errs = append(errs, q.rdb.Close())
	}
	return errors.Join(append(errs, q.stop())...)
}
