package backup

import (
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/backup/store"
)

// Stores opens destinations with the broker's S3 credentials; every call
// to a destination is retried with backoff (store.Retrying), each retry
// logged and counted.
type Stores struct {
	cfg     store.Config
	retry   store.RetryPolicy
	log     *zap.Logger
	metrics *Metrics
}

// NewStores returns Stores reading S3 credentials from credentialsFile
// (empty: the environment only).
func NewStores(credentialsFile string, log *zap.Logger, m *Metrics) *Stores {
	return &Stores{cfg: store.Config{CredentialsFile: credentialsFile}, retry: store.DefaultRetryPolicy(), log: log, metrics: m}
}

// Open opens the destination url. A bad URL is a *store.URLError.
func (s *Stores) Open(url string) (store.Store, error) {
	st, err := store.Open(url, s.cfg)
	if err != nil {
		return nil, err
	}
	dest := st.String()
	return store.Retrying(st, s.retry, func(op, name string, attempt int, err error) {
		s.metrics.retried(op)
		s.log.Warn("backup destination call failed, retrying", zap.String("dest", dest), zap.String("op", op),
			zap.String("name", name), zap.Int("attempt", attempt), zap.Error(err))
	}), nil
}
