package runtime

import (
	"context"
	"fmt"
)

// SetNotifyTrigger switches the insert trigger's NOTIFY on or off for every
// producer. Switch it off only once every worker runs in ModeWAL (or
// ModePoll): notify-mode workers would then learn of new jobs only from
// their safety poll. It takes a brief lock on fila_jobs.
func SetNotifyTrigger(ctx context.Context, db DB, on bool) error {
	verb := "DISABLE"
	if on {
		verb = "ENABLE"
	}
	if _, err := db.Exec(ctx, "ALTER TABLE fila_jobs "+verb+" TRIGGER fila_jobs_notify"); err != nil {
		return fmt.Errorf("%s the notify trigger: %w", verb, err)
	}
	return nil
}

// NotifyTriggerOn reports whether the insert trigger notifies.
func NotifyTriggerOn(ctx context.Context, db DB) (bool, error) {
	var enabled string
	err := db.QueryRow(ctx, `SELECT tgenabled::text FROM pg_trigger
		WHERE tgrelid = 'fila_jobs'::regclass AND tgname = 'fila_jobs_notify'`).Scan(&enabled)
	if err != nil {
		return false, fmt.Errorf("read the notify trigger: %w", err)
	}
	return enabled != "D", nil
}
