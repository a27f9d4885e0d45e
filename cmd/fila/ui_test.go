package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// startUI starts `fila ui` on a free port with the extra environment and
// returns its base URL, read from its one log line, and the process.
func startUI(t *testing.T, db *testdb.DB, env []string, args ...string) (string, *worker) {
	t.Helper()
	cmd := filaCmd(db, append([]string{"ui", "--addr", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	w := &worker{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("fila ui stderr:\n%s", w.stderr.String())
		}
	})
	var base string
	waitFor(t, 30*time.Second, "fila ui logs its URL", func() bool {
		for _, line := range strings.Split(w.stderr.String(), "\n") {
			var entry struct {
				Msg    string `json:"msg"`
				Logger string `json:"logger"`
				URL    string `json:"url"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "dashboard serving" {
				require.Equal(t, "ui", entry.Logger)
				base = strings.TrimSuffix(entry.URL, "/")
				return true
			}
		}
		return false
	})
	return base, w
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func httpPost(t *testing.T, u string, form url.Values, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestUIServesUntilSIGTERM(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	id := seedState(t, db, "charge", "dead")
	retry := url.Values{"op": {"retry"}, "id": {fmt.Sprint(id)}}

	// Without a token: read-only, and says so.
	base, w := startUI(t, db, nil)
	code, body := httpGet(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Read-only")
	code, _ = httpPost(t, base+"/actions/jobs", retry, "anything")
	require.Equal(t, http.StatusForbidden, code)
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.cmd.Wait(), "a SIGTERM stops fila ui cleanly")
	require.Contains(t, w.stderr.String(), "dashboard stopping")

	// The token from the environment allows actions; reading needs it too.
	base, w = startUI(t, db, []string{"FILA_UI_ADMIN_TOKEN=env-token-long-enough"})
	code, body = httpGet(t, base+"/dead")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="token"`, "sent to the login form")
	code, _ = httpPost(t, base+"/actions/jobs", retry, "wrong")
	require.Equal(t, http.StatusForbidden, code)
	code, body = httpPost(t, base+"/actions/jobs", retry, "env-token-long-enough")
	require.Equal(t, http.StatusOK, code, body)
	job, err := runtime.GetJob(context.Background(), db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, "pending", job.State)
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.cmd.Wait())

	// --admin-token wins over the environment.
	base, w = startUI(t, db, []string{"FILA_UI_ADMIN_TOKEN=env-token-long-enough"}, "--admin-token", "flag-token-long-enough")
	code, _ = httpPost(t, base+"/actions/queues", url.Values{"op": {"pause"}, "queue": {"default"}}, "env-token-long-enough")
	require.Equal(t, http.StatusForbidden, code)
	code, _ = httpPost(t, base+"/actions/queues", url.Values{"op": {"pause"}, "queue": {"default"}}, "flag-token-long-enough")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.cmd.Wait())
}

// TestUIAccessFlags: --read-token reads and acts on nothing, --public-read
// opens the pages, and a token too short is refused at start naming the
// flag or the variable it came from.
func TestUIAccessFlags(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	id := seedState(t, db, "charge", "dead")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--admin-token", "x"}, "--admin-token: the token is 1 character long: at least 16 are needed"},
		{nil, []string{"--read-token", "fifteen-chars!!"}, "--read-token: the token is 15 characters long: at least 16 are needed"},
		{[]string{"FILA_UI_ADMIN_TOKEN=short"}, nil, "$FILA_UI_ADMIN_TOKEN: the token is 5 characters long"},
		{[]string{"FILA_UI_READ_TOKEN=the-same-long-token"}, []string{"--admin-token", "the-same-long-token"},
			"$FILA_UI_READ_TOKEN is the same token as --admin-token"},
		{nil, []string{"--public-read=false"}, "--public-read=false needs a token to log in with"},
	} {
		cmd := filaCmd(db, append([]string{"ui", "--addr", "127.0.0.1:0"}, c.args...)...)
		cmd.Env = append(cmd.Env, c.env...)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%v %v", c.env, c.args)
		require.Contains(t, string(out), c.want)
		require.Equal(t, 1, strings.Count(string(out), "\n"), "one line: %s", out)
	}

	const reader = "a-read-token-long-enough"
	base, w := startUI(t, db, nil, "--read-token", reader)
	req, _ := http.NewRequest(http.MethodGet, base+fmt.Sprintf("/jobs/%d", id), nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	code, _ := httpPost(t, base+"/actions/jobs", url.Values{"op": {"retry"}, "id": {fmt.Sprint(id)}}, reader)
	require.Equal(t, http.StatusForbidden, code)
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.cmd.Wait())

	base, w = startUI(t, db, nil, "--admin-token", "an-admin-token-long-enough", "--public-read")
	code, body := httpGet(t, base+fmt.Sprintf("/jobs/%d", id))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="state"`, "--public-read: the job's page without a login")
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.cmd.Wait())
}

func TestUIRefusesBadSetup(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	base, _ := startUI(t, db, nil)
	taken := strings.TrimPrefix(base, "http://")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ui", "--addr", "nonsense"}, `--addr "nonsense": want HOST:PORT`},
		{[]string{"ui", "--addr", taken}, "--addr " + taken + ": cannot listen"},
		{[]string{"ui", "--port", "80"}, "flag provided but not defined: -port"},
	} {
		out, errOut, code := fila(t, db, c.args...)
		require.NotZero(t, code, "%v", c.args)
		require.Empty(t, out)
		line := strings.TrimSpace(errOut)
		require.NotContains(t, line, "\n", "%v: %s", c.args, errOut)
		require.Contains(t, line, c.want, "%v", c.args)
	}
	_, errOut, code := fila(t, testdb.New(t), "ui", "--addr", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.Equal(t, "fila ui: the database has no Fila tables: run `fila migrate` first\n", errOut)
}
