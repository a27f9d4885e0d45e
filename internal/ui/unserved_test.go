package ui_test

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The overview says what no live worker serves: pending jobs of a kind no
// live worker of their queue handles, and recurring tasks no live worker
// schedules, shown orphaned without a next slot; a worker that missed
// three refreshes of its row is counted gone, the others listed with how
// long ago they were seen. A paused queue's wait is left out of the
// headline.
func TestOverviewShowsWhatNoWorkerServes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval, last_seen_at, recurring) VALUES
		('h/1/live', 'h', 1, '{mail}', '{send}', 'notify', 'up', interval '5 seconds', now() - interval '2 seconds', '{nightly}'),
		('h/2/gone', 'h', 2, '{mail}', '{sms}', 'notify', 'up', interval '5 seconds', now() - interval '16 seconds', '{weekly}');
		INSERT INTO fila_jobs (queue, kind, run_at) VALUES
		('mail', 'send', now()), ('mail', 'sned', now() - interval '1 minute'), ('mail', 'sms', now()),
		('held', 'send', now() - interval '1 hour');
		INSERT INTO fila_queues (queue, paused) VALUES ('held', true);
		INSERT INTO fila_recurring (task, schedule, kind, queue, next_slot) VALUES
		('nightly', '0 2 * * *', 'report', 'mail', now() + interval '1 hour'),
		('weekly', '0 3 * * 1', 'report', 'mail', now() - interval '1 hour')`)
	require.NoError(t, err)
	srv := serve(t, db, "")
	code, body := get(t, client(t), srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	page := html.UnescapeString(body)

	require.Contains(t, page, `<p class="banner warn">1 pending job of kind "sned" on queue mail: no live worker handles it</p>`)
	require.Contains(t, page, `<p class="banner warn">1 pending job of kind "sms" on queue mail: no live worker handles it</p>`)
	require.Contains(t, page, `<p class="banner warn">1 pending job of kind "send" on queue held: no live worker handles it; live workers handle it on queue mail</p>`)
	require.Regexp(t, `<p class="banner warn">recurring task "weekly" \(kind "report" on queue mail\) is orphaned: no live worker schedules it, and its slot of \S+ passed 1h0m\d+s ago without a job`, page)
	require.NotContains(t, page, `recurring task "nightly"`+" (kind")

	require.Regexp(t, `(?s)<tr data-task="weekly">.*?<td>—</td><td class="num"><span class="badge bad"[^>]*>orphaned</span></td>`, page)
	require.Regexp(t, `(?s)<tr data-task="nightly">.*?<td class="num">1</td></tr>`, page)

	require.Regexp(t, `(?s)<tr data-worker="h/1/live">.*?<td class="num">[\d.]+ s ago</td>`, page)
	require.NotContains(t, page, "h/2/gone")
	require.Contains(t, page, `1 worker(s) gone without a clean stop: they missed three refreshes of their row`)

	require.Regexp(t, regexp.QuoteMeta(`Oldest runnable job: waited <strong>`)+`[^<]+</strong> in queue <a href="/jobs\?queue=mail&state=pending">mail</a> <span class="muted" id="paused-waiting">Paused queues, left out: <a href="/jobs\?queue=held&state=pending">held</a> \(1 runnable\)\.</span>`, page)
}
