// Package channel maps queue names to the NOTIFY channel their jobs are
// announced on. The insert trigger (migrations) and the listener must agree on
// this mapping, so it lives in one place.
package channel

import (
	"fmt"
	"regexp"
)

// Prefix is put before a queue name to form its channel. The triggers in
// migrations/schema.sql spell the same prefix.
const Prefix = "fila_"

// MaxQueueLen keeps Prefix+queue within PostgreSQL's 63-byte identifier limit,
// so LISTEN on the channel never silently truncates it.
const MaxQueueLen = 63 - len(Prefix)

// queuePattern is the same rule as the fila_jobs_queue_valid CHECK constraint.
var queuePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ValidateQueue returns an error naming the problem when queue cannot be used
// as a queue name (and therefore cannot become a channel name).
func ValidateQueue(queue string) error {
	switch {
	case queue == "":
		return fmt.Errorf("queue name is empty")
	case len(queue) > MaxQueueLen:
		return fmt.Errorf("queue name %q is %d bytes; at most %d fit in a channel name", queue, len(queue), MaxQueueLen)
	case !queuePattern.MatchString(queue):
		return fmt.Errorf("queue name %q may contain only letters, digits, '_', '.' and '-'", queue)
	}
	return nil
}

// ForQueue returns the channel the insert trigger notifies for queue.
func ForQueue(queue string) (string, error) {
	if err := ValidateQueue(queue); err != nil {
		return "", err
	}
	return Prefix + queue, nil
}
