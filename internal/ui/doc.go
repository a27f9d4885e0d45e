// Package ui is the web dashboard of the fila binary: `fila ui`, or
// `fila work --ui-addr`. It shows the queues (depth per state, paused or
// not, the oldest runnable job's wait), throughput and pickup latency over
// the last hour, dead jobs with their errors, the workers and their wake
// sources, and any job in detail; it searches jobs by id, kind, state and
// queue; and, for whoever holds the admin token, it retries, cancels and
// deletes jobs, one or many at once, and pauses and resumes queues.
//
// Pages are rendered on the server with html/template, which escapes
// everything a job carries: payloads and errors are shown as text in <pre>,
// never as markup. Templates, CSS and the one small script are embedded in
// the binary. Without an admin token the dashboard is read-only and every
// action answers 403; with one, actions are POSTs that need a logged-in
// session's CSRF token (or the token itself in an Authorization header) and
// pass the cross-origin check of Sec-Fetch-Site and Origin.
package ui
