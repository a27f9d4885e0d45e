// Package signup is a small application package written as a Fila user
// would write one: it enqueues a welcome e-mail in the same transaction as
// the user it creates, and handles that job. Its test shows package
// filatest at work.
package signup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/runtime"
)

// CreateUsersSQL is the application's own table.
const CreateUsersSQL = `CREATE TABLE IF NOT EXISTS users (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL UNIQUE
)`

const insertUserSQL = `INSERT INTO users (email) VALUES ($1::text) RETURNING id`

// SendWelcome is the job that welcomes a new user: its type names its kind
// and declares the kind's defaults.
type SendWelcome struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

// Kind is the job's kind.
func (SendWelcome) Kind() string { return "send-welcome" }

// InsertOpts: welcome mails go through the mail queue, once per user while
// one is pending or running, with ten tries.
func (w SendWelcome) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{Queue: "mail", MaxAttempts: 10, UniqueKey: fmt.Sprintf("user-%d", w.UserID)}
}

// Signup creates a user and enqueues the welcome mail in tx: both commit,
// or neither does.
func Signup(ctx context.Context, tx pgx.Tx, client *runtime.Client, email string) (int64, error) {
	var id int64
	if err := tx.QueryRow(ctx, insertUserSQL, email).Scan(&id); err != nil {
		return 0, fmt.Errorf("signup %s: %w", email, err)
	}
	if _, err := client.InsertTx(ctx, tx, SendWelcome{UserID: id, Email: email}, nil); err != nil {
		return 0, fmt.Errorf("signup %s: %w", email, err)
	}
	return id, nil
}

// Mailer sends mail; key is stable across a job's attempts, so that a
// mail sent twice is delivered once.
type Mailer interface {
	Send(ctx context.Context, to, subject, key string) error
}

// ErrRateLimited is what a Mailer returns, wrapped in a RateLimited, when
// it must be called again later.
var ErrRateLimited = errors.New("rate limited")

// RateLimited is a Mailer's refusal with the time to wait.
type RateLimited struct{ After time.Duration }

func (r RateLimited) Error() string { return fmt.Sprintf("rate limited for %s", r.After) }
func (r RateLimited) Unwrap() error { return ErrRateLimited }

// WelcomeKind is the handler of SendWelcome: a refusal for a while is
// retried when the mailer says, not after the backoff.
func WelcomeKind(m Mailer) runtime.Kind {
	k := runtime.Work(func(ctx context.Context, job *runtime.Job, w SendWelcome) error {
		err := m.Send(ctx, w.Email, "Welcome!", job.IdempotencyKey())
		var rl RateLimited
		if errors.As(err, &rl) {
			return runtime.RetryAfter(err, rl.After)
		}
		if err != nil {
			return err
		}
		return job.SetOutput(map[string]string{"sent_to": w.Email})
	})
	k.Timeout = 30 * time.Second
	return k
}
