package runtime

import "errors"

// newWALSource builds the logical-replication wake source.
func newWALSource(cfg Config) (wakeSource, error) {
	return nil, errors.New("Mode \"wal\" is not available in this build")
}
