// Package listener holds Fila's wake sources: the parts that tell claimers
// "there may be work now, claim from the head of the queue".
//
// It is a building block that package runtime wires together; its API is not
// stable, and applications should not need to import it.
//
// A wake is a hint, never a promise: the notification payload is a job id,
// which a source that implements Hinter keeps for the queue it woke (or
// HintMany when several events came, or some may have been lost). A claimer
// that was asleep when one notification came may claim that job by id (a
// primary-key probe) before it reads the head of its queue; any other wake
// claims from the head. The safety poll stays the path that finds every job.
// Wakes are coalesced into a channel of capacity one, so a burst of inserts
// costs claimers one extra scan, and a slow claimer never stops the listener
// from reading its socket (a listener that stops reading lets PostgreSQL's
// notification queue fill, and then producers' commits fail).
//
// A wake source can miss events: notifications sent while its connection is
// down are gone. It therefore sends a catch-up wake after every (re)connect,
// reports its health so the runtime can poll fast while it is unhealthy, and
// the safety poll remains the path that guarantees every job is found.
//
// Two sources implement Source:
//
//   - Listener issues LISTEN on one dedicated connection straight to
//     PostgreSQL and wakes on each NOTIFY from the jobs table's insert trigger.
//   - WAL follows inserts into the jobs table through logical replication
//     (pgoutput), so producers need not notify and skip the instance-wide lock
//     a notifying commit takes.
package listener
