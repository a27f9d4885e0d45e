package runtime

import (
	"context"
	"fmt"
)

// InsertFunc inserts jobs, in order, and says what became of each: the
// innermost one writes them to the database, each InsertMiddleware wraps
// the next.
type InsertFunc func(ctx context.Context, jobs []*InsertParams) ([]Inserted, error)

// InsertMiddleware wraps a Client's inserts, the first outermost: it sees
// every job before it is written (and may change its options, such as
// adding to its Metadata: copy the map first, it may be the type's or the
// caller's) and what the insert returned after. Package otelfila's is one.
type InsertMiddleware func(next InsertFunc) InsertFunc

// Client inserts typed jobs (JobArgs) through its InsertMiddleware: the
// typed API of Insert, InsertTx and InsertMany. It holds no connection of
// its own; db is a pool or a connection, and each …Tx method takes the
// caller's transaction instead. A Client is safe for concurrent use.
type Client struct {
	db     DB
	insert InsertFunc // the middleware around insertParams, composed once
}

// NewClient returns a Client that inserts into db through middleware, the
// first outermost.
func NewClient(db DB, middleware ...InsertMiddleware) *Client {
	return &Client{db: db, insert: composeInsert(middleware)}
}

// composeInsert wraps the database insert in middleware: the chain is
// built once, and the DB each call goes to (the pool, or a caller's
// transaction) travels in its context.
func composeInsert(middleware []InsertMiddleware) InsertFunc {
	f := InsertFunc(func(ctx context.Context, jobs []*InsertParams) ([]Inserted, error) {
		if fl, ok := ctx.Value(flowKey{}).(*flowInsert); ok && fl != nil {
			return insertFlow(ctx, targetOf(ctx), fl, jobs)
		}
		return insertParams(ctx, targetOf(ctx), jobs)
	})
	for i := len(middleware) - 1; i >= 0; i-- {
		f = middleware[i](f)
	}
	return f
}

// targetKey carries the DB an insert goes to through the middleware, so
// that one composed chain serves the pool and every caller's transaction.
type targetKey struct{}

func targetOf(ctx context.Context) DB { return ctx.Value(targetKey{}).(DB) }

// Insert enqueues one typed job: its kind is args' Kind, its payload args
// as JSON, its options what args declares (JobArgsWithInsertOpts)
// overridden field by field by opts.
func (c *Client) Insert(ctx context.Context, args JobArgs, opts *InsertOpts) (Inserted, error) {
	return c.InsertTx(ctx, c.db, args, opts)
}

// InsertTx is Insert inside the caller's transaction: the job exists only
// if tx commits, with the business data it belongs to.
func (c *Client) InsertTx(ctx context.Context, tx DB, args JobArgs, opts *InsertOpts) (Inserted, error) {
	p, err := argsParams(args, opts)
	if err != nil {
		return Inserted{}, err
	}
	res, err := c.insert(plainInsert(ctx, tx), []*InsertParams{&p})
	if err != nil {
		return Inserted{}, err
	}
	return res[0], nil
}

// InsertMany enqueues many typed jobs, all or nothing, as the untyped
// InsertMany does (one statement, or COPY from InsertManyCopyMin jobs), and
// returns what became of each, in order. A unique job's duplicate has the
// existing job's ID; Duplicate is not reported for a batch.
func (c *Client) InsertMany(ctx context.Context, jobs []ArgsParams) ([]Inserted, error) {
	return c.InsertManyTx(ctx, c.db, jobs)
}

// InsertManyTx is InsertMany inside the caller's transaction.
func (c *Client) InsertManyTx(ctx context.Context, tx DB, jobs []ArgsParams) ([]Inserted, error) {
	params := make([]*InsertParams, len(jobs))
	for i, j := range jobs {
		p, err := argsParams(j.Args, j.Opts)
		if err != nil {
			return nil, fmt.Errorf("insert many: job %d: %w", i, err)
		}
		params[i] = &p
	}
	if len(params) == 0 {
		return nil, nil
	}
	return c.insert(plainInsert(ctx, tx), params)
}

// plainInsert is the context of an insert of jobs one by one into db: a
// middleware that inserts jobs of its own, while a workflow or batch goes
// through it, inserts them as plain jobs.
func plainInsert(ctx context.Context, db DB) context.Context {
	if ctx.Value(flowKey{}) != nil {
		ctx = context.WithValue(ctx, flowKey{}, (*flowInsert)(nil))
	}
	return context.WithValue(ctx, targetKey{}, db)
}

// insertParams is the database's end of a Client's inserts.
func insertParams(ctx context.Context, db DB, jobs []*InsertParams) ([]Inserted, error) {
	if len(jobs) == 1 {
		p := jobs[0]
		res, err := InsertJob(ctx, db, p.Kind, p.Payload, &p.InsertOpts)
		if err != nil {
			return nil, err
		}
		return []Inserted{res}, nil
	}
	params := make([]InsertParams, len(jobs))
	for i, p := range jobs {
		params[i] = *p
	}
	ids, err := InsertMany(ctx, db, params)
	if err != nil {
		return nil, err
	}
	out := make([]Inserted, len(ids))
	for i, id := range ids {
		out[i] = Inserted{ID: id}
	}
	return out, nil
}
