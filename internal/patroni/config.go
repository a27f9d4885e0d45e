package patroni

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
)

// Patroni's timing. loop_wait is how often each node looks at the cluster,
// and so how soon it notices a dead postmaster or a deleted leader key;
// ttl is how long a leader that stops renewing its key (a frozen or killed
// Patroni) keeps it; retry_timeout bounds its DCS and PostgreSQL retries.
// Patroni wants loop_wait + 2 × retry_timeout <= ttl. None of the faults
// waits for the ttl: a switchover and a failover after a crash both hand the
// key over at once.
const (
	loopWait     = 1
	ttl          = 15
	retryTimeout = 5
)

// defaultParameters are the PostgreSQL settings of both nodes, set in the
// cluster-wide (DCS) configuration so that both always agree on the ones a
// standby needs equal to its primary's.
var defaultParameters = map[string]string{
	// The WAL wake source needs logical decoding, a slot and a sender of
	// its own per worker, beside the standby's.
	"wal_level":             "logical",
	"max_wal_senders":       "20",
	"max_replication_slots": "20",
	"max_connections":       "200",
	// Safe here: the faults kill processes, never the machine.
	"fsync":              "off",
	"synchronous_commit": "on",
	// A switchover checkpoints the old primary before it hands over; keep
	// that short.
	"checkpoint_timeout": "5min",
	"wal_keep_size":      "256MB",
}

// fixedParameters cannot be set through Options.Settings: the cluster
// decides them per node, or Patroni manages them.
var fixedParameters = []string{
	"listen_addresses", "port", "unix_socket_directories", "hba_file", "ident_file",
	"synchronous_standby_names", "primary_conninfo", "primary_slot_name", "data_directory",
}

// nodeConfig is the Patroni configuration file of node n (JSON, which is
// YAML too).
func (c *Cluster) nodeConfig(n *node, settings map[string]string) ([]byte, error) {
	params := maps.Clone(defaultParameters)
	maps.Copy(params, settings)
	loopback := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	cfg := map[string]any{
		"scope":     c.scope,
		"namespace": "/fila/",
		"name":      n.name,
		"log":       map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen":          loopback(n.apiPort),
			"connect_address": loopback(n.apiPort),
		},
		"etcd3": map[string]any{"hosts": []string{loopback(c.etcdPort)}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     ttl,
				"loop_wait":               loopWait,
				"retry_timeout":           retryTimeout,
				"maximum_lag_on_failover": 16 << 20,
				// Only a standby that confirmed every commit may be promoted,
				// and commits wait for it: an acknowledged job survives the
				// loss of the primary.
				"synchronous_mode": true,
				// A primary whose postmaster died is failed over at once
				// rather than restarted where it was.
				"primary_start_timeout": 0,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters":    params,
				},
			},
			"initdb": []any{"no-sync", map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          loopback(n.pgPort),
			"connect_address": loopback(n.pgPort),
			"data_dir":        n.data,
			"bin_dir":         c.bin,
			"pgpass":          filepath.Join(n.dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": "postgres"},
				"replication": map[string]string{"username": "postgres"},
				"rewind":      map[string]string{"username": "postgres"},
			},
			// A fast checkpoint: the default spread one makes a new standby
			// wait minutes for its base backup.
			"basebackup": []any{map[string]string{"checkpoint": "fast"}},
			"parameters": map[string]string{"unix_socket_directories": n.dir},
			"pg_hba": []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
		},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("patroni: configuration of %s: %w", n.name, err)
	}
	return b, nil
}
