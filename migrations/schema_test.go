package migrations_test

import (
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

var update = flag.Bool("update", false, "rewrite schema.sql and doc.go's list of objects from a freshly migrated database")

// schemaMajor is the PostgreSQL major CI runs, which schema.sql is generated
// on: pg_get_functiondef and the other deparsers print the same schema a
// little differently from one major to the next. To move CI to another
// major, change this and regenerate.
const schemaMajor = 15

const (
	schemaFile = "schema.sql"
	docFile    = "doc.go"
	docHeading = "// # What touched each object"
	// claimerSQL holds the hot statements, whose comments give the
	// signatures of the functions they call.
	claimerSQL = "../claimer/sql.go"
	regenerate = "go test ./migrations -run TestSchemaFile -update"
)

// TestSchemaFile migrates a fresh database and compares what it built with
// schema.sql; with -update it rewrites the file instead. Then it checks that
// the file alone builds the same schema, that doc.go lists the migrations
// that touched each of its objects, and that the claimer's comments give the
// signatures of the functions its statements call.
func TestSchemaFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	var major int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&major))
	if major != schemaMajor {
		t.Fatalf("%s is generated on PostgreSQL %d, the major CI runs, and this server is PostgreSQL %d: "+
			"each major prints definitions differently. Run the test against PostgreSQL %d, "+
			"or change schemaMajor in schema_test.go when CI moves, then %s",
			schemaFile, schemaMajor, major, schemaMajor, regenerate)
	}
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	got, err := dumpSchema(ctx, db.Pool)
	require.NoError(t, err)

	t.Run("matches", func(t *testing.T) {
		if *update {
			require.NoError(t, os.WriteFile(schemaFile, []byte(got.text), 0o644))
			return
		}
		want, err := os.ReadFile(schemaFile)
		require.NoError(t, err, "run %s", regenerate)
		if m := regexp.MustCompile(`(?m)^-- Generated on PostgreSQL (\d+)`).FindSubmatch(want); m != nil && string(m[1]) != strconv.Itoa(schemaMajor) {
			t.Fatalf("%s was generated on PostgreSQL %s, and the test is pinned to %d: run %s on PostgreSQL %d",
				schemaFile, m[1], schemaMajor, regenerate, schemaMajor)
		}
		if string(want) != got.text {
			t.Fatalf("%s is not the schema Migrate builds. If the change to the migrations is meant, run\n\n\t%s\n\nand commit the result.\n\n%s",
				schemaFile, regenerate, lineDiff(string(want), got.text, "schema.sql (checked in)", "what Migrate builds", 80))
		}
	})

	t.Run("applies", func(t *testing.T) {
		// The file is complete: alone, it builds the same schema. The bodies
		// of its functions are not checked as they are created, so that the
		// file's order (by name) need not follow the calls between SQL
		// functions: Migrate checked them.
		empty := testdb.New(t)
		require.NoError(t, pgx.BeginFunc(ctx, empty.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL check_function_bodies = off"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, got.text)
			return err
		}))
		requireSameSchema(t, schema(t, db), schema(t, empty), "%s applied to an empty database, against a migrated one", schemaFile)
		again, err := dumpSchema(ctx, empty.Pool)
		require.NoError(t, err)
		if again.text != got.text {
			t.Fatalf("%s applied to an empty database dumps differently:\n%s", schemaFile,
				lineDiff(got.text, again.text, "from a migrated database", "from schema.sql applied", 80))
		}
	})

	t.Run("doc", func(t *testing.T) {
		src, err := os.ReadFile(docFile)
		require.NoError(t, err)
		all, err := migrations.All()
		require.NoError(t, err)
		want, err := replaceDocList(string(src), docList(got, touchedBy(all)))
		require.NoError(t, err)
		if *update {
			require.NoError(t, os.WriteFile(docFile, []byte(want), 0o644))
			return
		}
		if want != string(src) {
			t.Fatalf("%s's list of what touched each object is out of date: run %s\n\n%s",
				docFile, regenerate, lineDiff(string(src), want, "doc.go (checked in)", "from the migrations", 40))
		}
	})

	t.Run("claimer signatures", func(t *testing.T) {
		checkSignatureComments(t, got, claimerSQL, "fila_claim", "fila_claim_id", "fila_finish", "fila_heartbeat", "fila_release", "fila_sleep")
	})
}

// dumped is the schema of a database as schema.sql has it, with the names
// of its objects.
type dumped struct {
	text   string
	tables []dumpedTable
	// functions are the names of the functions, in the file's order.
	functions []string
	// signatures holds each function's name, arguments and result as the
	// first lines of its definition have them, "name(arguments) RETURNS
	// result", by name (more than one for an overloaded name).
	signatures map[string][]string
}

type dumpedTable struct {
	name              string
	indexes, triggers []string
}

// dumpSchema prints the schema of the database's current schema as SQL, in
// an order that depends on the objects only: tables by name, each with its
// columns (in their order), constraints (the primary key first, then by
// name) and indexes (by name); functions by name; then, table by table, each
// trigger function followed by the triggers that run it. That is also an
// order in which the file applies to an empty database. Definitions are
// PostgreSQL's own (pg_get_functiondef, pg_get_indexdef,
// pg_get_constraintdef, pg_get_triggerdef, pg_get_expr), with the schema's
// name taken off the objects' names; there are no owners, privileges or
// session settings. A kind of object that this does not print (a view, an enum, a
// sequence of its own, …) is an error, rather than a file that leaves it out.
func dumpSchema(ctx context.Context, pool *pgxpool.Pool) (*dumped, error) {
	var schemaName string
	if err := pool.QueryRow(ctx, "SELECT quote_ident(current_schema())").Scan(&schemaName); err != nil {
		return nil, err
	}
	qualified := schemaName + "."
	unprinted, err := collect(ctx, pool, unprintedSQL, func(r pgx.CollectableRow, s *string) error { return r.Scan(s) })
	if err != nil {
		return nil, err
	}
	if len(unprinted) > 0 {
		return nil, fmt.Errorf("the schema holds objects %s does not print yet (teach dumpSchema in schema_test.go): %s",
			schemaFile, strings.Join(unprinted, ", "))
	}
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	last := all[len(all)-1]

	d := &dumped{signatures: map[string][]string{}}
	var b strings.Builder
	fmt.Fprintf(&b, `-- Fila's schema as Migrate leaves it: tables with their columns,
-- constraints and indexes, then functions, then triggers.
--
-- Migration: %04d (%s)
-- Generated on PostgreSQL %d from a freshly migrated database: do not edit.
--
-- The numbered migrations are its history, and doc.go lists which of them
-- touched each object. TestSchemaFile fails when Migrate builds anything
-- else; after changing or adding a migration, run
--
--   %s
--
-- Applied to an empty database, this file builds the same schema (the test
-- checks that too); databases are built by Migrate.
`, last.Version, last.Name, schemaMajor, regenerate)

	b.WriteString("\n-- Tables, each with its indexes.\n")
	type table struct {
		oid               uint32
		name, persistence string
		options           []string
		comment           *string
	}
	tables, err := collect(ctx, pool, `SELECT c.oid, quote_ident(c.relname), c.relpersistence::text, coalesce(c.reloptions, '{}'),
       obj_description(c.oid, 'pg_class')
FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
ORDER BY c.relname`, func(r pgx.CollectableRow, t *table) error {
		return r.Scan(&t.oid, &t.name, &t.persistence, &t.options, &t.comment)
	})
	if err != nil {
		return nil, err
	}
	// part is one line of a table's definition (a column or a constraint,
	// or an index) with its name and comment.
	type part struct {
		name, def string
		comment   *string
	}
	scanPart := func(r pgx.CollectableRow, p *part) error { return r.Scan(&p.name, &p.def, &p.comment) }
	for _, tb := range tables {
		var comments []string
		comment := func(on string, c *string) {
			if c != nil {
				comments = append(comments, fmt.Sprintf("COMMENT ON %s IS %s;", on, literal(*c)))
			}
		}
		comment("TABLE "+tb.name, tb.comment)
		columns, err := collect(ctx, pool, columnsSQL, scanPart, tb.oid)
		if err != nil {
			return nil, err
		}
		constraints, err := collect(ctx, pool, `SELECT quote_ident(k.conname), pg_get_constraintdef(k.oid), obj_description(k.oid, 'pg_constraint')
FROM pg_constraint k
WHERE k.conrelid = $1::oid AND k.contype <> 't'
ORDER BY k.contype <> 'p', k.conname`, scanPart, tb.oid)
		if err != nil {
			return nil, err
		}
		indexes, err := collect(ctx, pool, `SELECT quote_ident(ic.relname), pg_get_indexdef(i.indexrelid), obj_description(i.indexrelid, 'pg_class')
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = $1::oid
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k
                  WHERE k.conrelid = i.indrelid AND k.conindid = i.indexrelid AND k.contype IN ('p', 'u', 'x'))
ORDER BY ic.relname`, scanPart, tb.oid)
		if err != nil {
			return nil, err
		}

		var lines []string
		for _, c := range columns {
			lines = append(lines, c.def)
			comment("COLUMN "+tb.name+"."+c.name, c.comment)
		}
		for _, c := range constraints {
			lines = append(lines, "CONSTRAINT "+c.name+" "+c.def)
			comment("CONSTRAINT "+c.name+" ON "+tb.name, c.comment)
		}
		create := "CREATE TABLE"
		if tb.persistence == "u" {
			create = "CREATE UNLOGGED TABLE"
		}
		fmt.Fprintf(&b, "\n%s %s (\n    %s\n)", create, tb.name, strings.Join(lines, ",\n    "))
		if len(tb.options) > 0 {
			fmt.Fprintf(&b, " WITH (\n    %s\n)", strings.Join(tb.options, ",\n    "))
		}
		b.WriteString(";\n")
		dt := dumpedTable{name: tb.name}
		if len(indexes) > 0 {
			b.WriteString("\n")
		}
		for _, ix := range indexes {
			fmt.Fprintf(&b, "%s;\n", strings.Replace(ix.def, " ON "+qualified, " ON ", 1))
			comment("INDEX "+ix.name, ix.comment)
			dt.indexes = append(dt.indexes, ix.name)
		}
		if len(comments) > 0 {
			fmt.Fprintf(&b, "\n%s\n", strings.Join(comments, "\n"))
		}
		d.tables = append(d.tables, dt)
	}

	type function struct {
		oid              uint32
		name, def, args  string
		comment          *string
		trigger, printed bool
	}
	functions, err := collect(ctx, pool, `SELECT p.oid, quote_ident(p.proname), pg_get_functiondef(p.oid),
       pg_get_function_identity_arguments(p.oid), obj_description(p.oid, 'pg_proc'), p.prorettype = 'trigger'::regtype
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`, func(r pgx.CollectableRow, f *function) error {
		return r.Scan(&f.oid, &f.name, &f.def, &f.args, &f.comment, &f.trigger)
	})
	if err != nil {
		return nil, err
	}
	printFunction := func(f *function) {
		first, rest, _ := strings.Cut(f.def, "\n")
		first = strings.Replace(first, " FUNCTION "+qualified, " FUNCTION ", 1)
		first = strings.Replace(first, " PROCEDURE "+qualified, " PROCEDURE ", 1)
		fmt.Fprintf(&b, "\n%s\n%s;\n", first, strings.TrimRight(rest, "\n"))
		// The signature as printed: name(arguments), then " RETURNS …"
		// on the next line (a procedure has none).
		signature := first[strings.Index(first, " "+f.name+"(")+1:]
		if returns, _, _ := strings.Cut(rest, "\n"); strings.HasPrefix(returns, " RETURNS ") {
			signature += returns
		}
		if f.comment != nil {
			fmt.Fprintf(&b, "\nCOMMENT ON FUNCTION %s(%s) IS %s;\n", f.name, f.args, literal(*f.comment))
		}
		f.printed = true
		if !slices.Contains(d.functions, f.name) {
			d.functions = append(d.functions, f.name)
		}
		d.signatures[f.name] = append(d.signatures[f.name], signature)
	}

	type trigger struct {
		name, table, def, enabled string
		function                  uint32
		comment                   *string
	}
	triggers, err := collect(ctx, pool, `SELECT quote_ident(t.tgname), quote_ident(c.relname), pg_get_triggerdef(t.oid), t.tgenabled::text,
       t.tgfoid, obj_description(t.oid, 'pg_trigger')
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
ORDER BY c.relname, t.tgname`, func(r pgx.CollectableRow, t *trigger) error {
		return r.Scan(&t.name, &t.table, &t.def, &t.enabled, &t.function, &t.comment)
	})
	if err != nil {
		return nil, err
	}
	runs := map[uint32]bool{}
	for _, tr := range triggers {
		runs[tr.function] = true
	}

	b.WriteString("\n-- Functions.\n")
	for i := range functions {
		if f := &functions[i]; !(f.trigger && runs[f.oid]) {
			printFunction(f)
		}
	}
	if len(triggers) > 0 {
		b.WriteString("\n-- Triggers, each after the function it runs.\n")
	}
	for _, tr := range triggers {
		for i := range functions {
			if f := &functions[i]; f.oid == tr.function && !f.printed {
				printFunction(f)
			}
		}
		fmt.Fprintf(&b, "\n%s;\n", triggerDef(tr.def, qualified))
		switch tr.enabled {
		case "D":
			fmt.Fprintf(&b, "ALTER TABLE %s DISABLE TRIGGER %s;\n", tr.table, tr.name)
		case "R":
			fmt.Fprintf(&b, "ALTER TABLE %s ENABLE REPLICA TRIGGER %s;\n", tr.table, tr.name)
		case "A":
			fmt.Fprintf(&b, "ALTER TABLE %s ENABLE ALWAYS TRIGGER %s;\n", tr.table, tr.name)
		}
		if tr.comment != nil {
			fmt.Fprintf(&b, "COMMENT ON TRIGGER %s ON %s IS %s;\n", tr.name, tr.table, literal(*tr.comment))
		}
		for i := range d.tables {
			if d.tables[i].name == tr.table {
				d.tables[i].triggers = append(d.tables[i].triggers, tr.name)
			}
		}
	}
	d.text = b.String()
	return d, nil
}

// collect runs a query and scans each of its rows into a T.
func collect[T any](ctx context.Context, pool *pgxpool.Pool, sql string, scan func(pgx.CollectableRow, *T) error, args ...any) ([]T, error) {
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) {
		var v T
		err := scan(r, &v)
		return v, err
	})
}

// unprintedSQL names the objects of the current schema that dumpSchema
// does not print.
const unprintedSQL = `
SELECT kind || ' ' || name FROM (
  SELECT CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'p' THEN 'partitioned table'
                        WHEN 'f' THEN 'foreign table' WHEN 'c' THEN 'composite type' ELSE 'sequence' END AS kind,
         c.relname::text AS name
    FROM pg_class c
   WHERE c.relnamespace = current_schema()::regnamespace
     AND (c.relkind IN ('v', 'm', 'p', 'f', 'c')
          -- a sequence is printed only as an identity column's
          OR (c.relkind = 'S' AND NOT EXISTS (SELECT 1 FROM pg_depend d
                                               WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'i')))
  UNION ALL
  SELECT 'inheriting table', c.relname::text
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE c.relnamespace = current_schema()::regnamespace
  UNION ALL
  SELECT 'type', t.typname::text
    FROM pg_type t
   WHERE t.typnamespace = current_schema()::regnamespace
     AND (t.typtype IN ('e', 'd', 'r', 'm') OR (t.typtype = 'b' AND t.typcategory <> 'A'))
  UNION ALL
  SELECT 'aggregate', p.proname::text
    FROM pg_proc p
   WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind IN ('a', 'w')
) x ORDER BY 1`

// columnsSQL gives a table's columns in their order: each one's name, its
// line of CREATE TABLE, and its comment.
const columnsSQL = `
SELECT quote_ident(a.attname),
       quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attcollation <> t.typcollation THEN ' COLLATE ' || quote_ident(co.collname) ELSE '' END
       || CASE WHEN a.attidentity = 'a' THEN ' GENERATED ALWAYS AS IDENTITY'
               WHEN a.attidentity = 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY'
               ELSE '' END
       || CASE WHEN a.attidentity <> '' THEN coalesce((
              SELECT format(' (START WITH %s INCREMENT BY %s MINVALUE %s MAXVALUE %s CACHE %s%s)',
                            s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache,
                            CASE WHEN s.seqcycle THEN ' CYCLE' ELSE '' END)
              FROM pg_sequence s
              WHERE s.seqrelid = pg_get_serial_sequence(a.attrelid::regclass::text, a.attname)::regclass
                AND NOT (s.seqstart = 1 AND s.seqincrement = 1 AND s.seqmin = 1 AND s.seqcache = 1 AND NOT s.seqcycle
                         AND s.seqmax = CASE s.seqtypid WHEN 'int2'::regtype THEN 32767
                                                        WHEN 'int4'::regtype THEN 2147483647
                                                        ELSE 9223372036854775807 END)), '')
               ELSE '' END
       || CASE WHEN a.attgenerated = 's' THEN ' GENERATED ALWAYS AS (' || pg_get_expr(d.adbin, d.adrelid) || ') STORED'
               WHEN d.adbin IS NOT NULL THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid)
               ELSE '' END
       || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
       col_description(a.attrelid, a.attnum)
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

// triggerDef takes the schema's name off a trigger's table and puts each
// clause after the events on a line of its own.
func triggerDef(def, qualified string) string {
	def = strings.Replace(def, " ON "+qualified, " ON ", 1)
	head, tail, ok := strings.Cut(def, " FOR EACH ")
	if !ok {
		return def
	}
	head = strings.Replace(head, " REFERENCING ", "\n    REFERENCING ", 1)
	exec := strings.LastIndex(tail, " EXECUTE FUNCTION ")
	if exec < 0 {
		return def
	}
	each, call := tail[:exec], tail[exec+1:]
	each = strings.Replace(each, " WHEN (", "\n    WHEN (", 1)
	return head + "\n    FOR EACH " + each + "\n    " + call
}

// literal quotes s as an SQL string constant.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ddlName matches a statement of an up script that creates, alters, drops
// or comments on an object by name; the last group is the name.
var ddlName = regexp.MustCompile(`(?i)\b(?:CREATE(?:\s+OR\s+REPLACE)?(?:\s+UNLOGGED)?(?:\s+UNIQUE)?(?:\s+CONSTRAINT)?\s+(?:TABLE|INDEX|FUNCTION|PROCEDURE|TRIGGER)(?:\s+CONCURRENTLY)?(?:\s+IF\s+NOT\s+EXISTS)?` +
	`|(?:ALTER|DROP)\s+(?:TABLE|INDEX|FUNCTION|PROCEDURE|TRIGGER)(?:\s+CONCURRENTLY)?(?:\s+IF\s+EXISTS)?(?:\s+ONLY)?` +
	`|COMMENT\s+ON\s+(?:TABLE|INDEX|FUNCTION|PROCEDURE|TRIGGER)` +
	`|(?:ENABLE|DISABLE)(?:\s+REPLICA|\s+ALWAYS)?\s+TRIGGER)` +
	`\s+(?:"?\w+"?\.)?"?(\w+)"?`)

// commentOnPart matches a comment on a column or a constraint, which
// touches its table; the table's name is in the first or the second group.
var commentOnPart = regexp.MustCompile(`(?i)\bCOMMENT\s+ON\s+(?:COLUMN\s+(?:\w+\.)?(\w+)\.\w+\s+IS|CONSTRAINT\s+\w+\s+ON\s+(?:\w+\.)?(\w+))`)

// sqlComment matches an SQL comment.
var sqlComment = regexp.MustCompile(`--[^\n]*|/\*[\s\S]*?\*/`)

// touchedBy gives, for each object name, the versions of the migrations
// whose up scripts create, alter, drop or comment on it by name.
func touchedBy(all []migrations.Migration) map[string][]int {
	touched := map[string][]int{}
	for _, m := range all {
		up := sqlComment.ReplaceAllString(m.Up, "")
		var names []string
		for _, g := range ddlName.FindAllStringSubmatch(up, -1) {
			names = append(names, g[1])
		}
		for _, g := range commentOnPart.FindAllStringSubmatch(up, -1) {
			names = append(names, g[1]+g[2])
		}
		for _, name := range names {
			name = strings.ToLower(name)
			if !slices.Contains(touched[name], m.Version) {
				touched[name] = append(touched[name], m.Version)
			}
		}
	}
	return touched
}

// docList is doc.go's list of the objects in d, each with the migrations
// that touched it: every table, then its indexes and triggers, then the
// functions.
func docList(d *dumped, touched map[string][]int) []string {
	type row struct{ name, kind, versions string }
	var rows []row
	add := func(name, kind string) {
		var vs []string
		for _, v := range touched[strings.Trim(strings.TrimSpace(name), `"`)] {
			vs = append(vs, fmt.Sprintf("%04d", v))
		}
		if len(vs) == 0 {
			vs = []string{"Migrate"}
		}
		rows = append(rows, row{name, kind, strings.Join(vs, " ")})
	}
	for _, tb := range d.tables {
		add(tb.name, "table")
		for _, ix := range tb.indexes {
			add("  "+ix, "index")
		}
		for _, tr := range tb.triggers {
			add("  "+tr, "trigger")
		}
	}
	for _, f := range d.functions {
		add(f, "function")
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(r.name))
	}
	lines := make([]string, len(rows))
	for i, r := range rows {
		lines[i] = strings.TrimRight(fmt.Sprintf("%-*s  %-8s  %s", width, r.name, r.kind, r.versions), " ")
	}
	return lines
}

// replaceDocList puts list in place of the code block that follows
// docHeading in doc.go's source.
func replaceDocList(src string, list []string) (string, error) {
	lines := strings.Split(src, "\n")
	start := slices.Index(lines, docHeading)
	if start < 0 {
		return "", fmt.Errorf("%s has no line %q, after which its list of objects goes", docFile, docHeading)
	}
	for start < len(lines) && !strings.HasPrefix(lines[start], "//\t") {
		start++
	}
	if start == len(lines) {
		return "", fmt.Errorf("%s has no indented block after %q for its list of objects", docFile, docHeading)
	}
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "//\t") {
		end++
	}
	block := make([]string, len(list))
	for i, l := range list {
		block[i] = "//\t" + l
	}
	return strings.Join(slices.Concat(lines[:start], block, lines[end:]), "\n"), nil
}

// callSQL finds the function a statement calls: SELECT f(…) or SELECT … FROM f(…).
var callSQL = regexp.MustCompile(`(?:FROM|SELECT)\s+(fila_\w+)\(`)

// checkSignatureComments fails unless the comment of each constant of the
// Go file at path whose statement calls a function of the schema gives the
// function's signature as schema.sql has it, and unless the statements
// call each of the functions want.
func checkSignatureComments(t *testing.T, d *dumped, path string, want ...string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	require.NoError(t, err)
	var called []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				text, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				m := callSQL.FindStringSubmatch(text)
				if m == nil {
					continue
				}
				called = append(called, m[1])
				sigs := d.signatures[m[1]]
				if len(sigs) == 0 {
					t.Errorf("%s: %s calls %s, which %s does not have", fset.Position(lit.Pos()), vs.Names[i].Name, m[1], schemaFile)
					continue
				}
				comment := ""
				if vs.Doc != nil {
					comment = normalizeSQL(vs.Doc.Text())
				}
				if !slices.ContainsFunc(sigs, func(s string) bool { return strings.Contains(comment, normalizeSQL(s)) }) {
					t.Errorf("%s: the comment of %s must give the signature of %s as %s has it:\n\n%s",
						fset.Position(vs.Pos()), vs.Names[i].Name, m[1], schemaFile, wrapComment(sigs[0]))
				}
			}
		}
	}
	for _, fn := range want {
		require.Contains(t, called, fn, "%s no longer calls %s: update the list in TestSchemaFile", path, fn)
	}
}

// normalizeSQL makes the text of a signature comparable however it is
// wrapped.
func normalizeSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "( ", "(")
	return strings.ReplaceAll(s, " )", ")")
}

// wrapComment wraps s as a Go comment of lines within 80 columns.
func wrapComment(s string) string {
	var lines []string
	line := "\t//"
	for _, w := range strings.Fields(s) {
		if len(line)+1+len(w) > 76 && line != "\t//" {
			lines = append(lines, line)
			line = "\t//"
		}
		line += " " + w
	}
	return strings.Join(append(lines, line), "\n")
}

// lineDiff shows how b differs from a, line by line, in the manner of a
// unified diff: the changed lines with three lines of context around them,
// at most limit lines in all.
func lineDiff(a, b, nameA, nameB string, limit int) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	n, m := len(al), len(bl)
	// common[i][j] is the length of the longest common subsequence of
	// al[i:] and bl[j:].
	common := make([][]int32, n+1)
	for i := range common {
		common[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				common[i][j] = common[i+1][j+1] + 1
			} else {
				common[i][j] = max(common[i+1][j], common[i][j+1])
			}
		}
	}
	type op struct {
		kind   byte
		text   string
		ai, bi int // line numbers, from 1, before this line
	}
	var ops []op
	for i, j := 0, 0; i < n || j < m; {
		switch {
		case i < n && j < m && al[i] == bl[j]:
			ops = append(ops, op{' ', al[i], i + 1, j + 1})
			i, j = i+1, j+1
		case i < n && (j == m || common[i+1][j] >= common[i][j+1]):
			ops = append(ops, op{'-', al[i], i + 1, j + 1})
			i++
		default:
			ops = append(ops, op{'+', bl[j], i + 1, j + 1})
			j++
		}
	}
	const context = 3
	show := make([]bool, len(ops))
	for k, o := range ops {
		if o.kind != ' ' {
			for c := max(0, k-context); c <= min(len(ops)-1, k+context); c++ {
				show[c] = true
			}
		}
	}
	out := []string{"--- " + nameA, "+++ " + nameB}
	for k := 0; k < len(ops); k++ {
		if !show[k] {
			continue
		}
		if k == 0 || !show[k-1] {
			out = append(out, fmt.Sprintf("@@ -%d +%d @@", ops[k].ai, ops[k].bi))
		}
		out = append(out, string(ops[k].kind)+ops[k].text)
	}
	if len(out) > limit {
		out = append(out[:limit], fmt.Sprintf("… and %d more lines of difference", len(out)-limit))
	}
	return strings.Join(out, "\n")
}
