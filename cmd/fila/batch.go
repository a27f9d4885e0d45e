package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/fila-run/fila/runtime"
)

func init() {
	register("batch", "group jobs under one callback job, inserted once when they all finished: batch new --callback-kind K | seal ID | show ID", runBatch)
	describeArgs("batch", "new --callback-kind KIND [--callback-queue Q] [--callback-payload JSON] | seal ID | show [--json] ID")
}

func runBatch(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	kind := fs.String("callback-kind", "", "new: the callback job's kind (required)")
	queue := fs.String("callback-queue", "default", "new: the callback job's queue")
	payload := fs.String("callback-payload", "{}", `new: the callback's payload, a JSON object; the batch's counts are added under "batch"`)
	asJSON := fs.Bool("json", false, "show: print JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return g.usageError("say new, seal ID or show ID")
	}
	verb := pos[0]
	var id int64
	switch verb {
	case "new":
		if len(pos) != 1 {
			return g.usageError("new takes no argument")
		}
		if *kind == "" {
			return g.usageError("new needs --callback-kind")
		}
		if !json.Valid([]byte(*payload)) {
			return fmt.Errorf("--callback-payload is not valid JSON: %q", truncateString(*payload, 80))
		}
	case "seal", "show":
		if len(pos) != 2 {
			return g.usageError("%s takes one batch id", verb)
		}
		if id, err = strconv.ParseInt(pos[1], 10, 64); err != nil || id <= 0 {
			return g.usageError("%q is not a batch id", pos[1])
		}
	default:
		return g.usageError("%q is not new, seal or show", verb)
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	notFound := func(err error) error {
		if errors.Is(err, runtime.ErrBatchNotFound) {
			return fmt.Errorf("batch %d does not exist", id)
		}
		return err
	}
	switch verb {
	case "new":
		id, err := runtime.NewBatch(ctx, pool, runtime.BatchCallback{Kind: *kind, Queue: *queue, Payload: json.RawMessage(*payload)})
		if err != nil {
			return err
		}
		fmt.Fprintln(g.stdout, id)
	case "seal":
		if err := runtime.SealBatch(ctx, pool, id); err != nil {
			return notFound(err)
		}
		b, err := runtime.GetBatch(ctx, pool, id)
		if err != nil {
			return err
		}
		printBatchLine(g.stdout, "sealed batch ", &b)
	case "show":
		b, err := runtime.GetBatch(ctx, pool, id)
		if err != nil {
			return notFound(err)
		}
		if *asJSON {
			enc := json.NewEncoder(g.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(b)
		}
		printBatchLine(g.stdout, "batch ", &b)
	}
	return nil
}
