package report_test

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench/report"
)

// svgDoc decodes an SVG, failing the test unless it is well-formed XML, and
// returns its text content (one string per <text>, tspans joined) and the
// d attribute of each path.
func svgDoc(t *testing.T, svg []byte) (texts, paths []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	depth, textDepth := 0, -1
	var cur strings.Builder
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = tok.Name.Local
				require.Equal(t, "http://www.w3.org/2000/svg", tok.Name.Space)
			}
			depth++
			if tok.Name.Local == "text" {
				textDepth = depth
				cur.Reset()
			}
			if tok.Name.Local == "path" {
				for _, a := range tok.Attr {
					if a.Name.Local == "d" {
						paths = append(paths, a.Value)
					}
				}
			}
		case xml.CharData:
			if textDepth >= 0 {
				cur.Write(tok)
			}
		case xml.EndElement:
			if depth == textDepth {
				texts = append(texts, cur.String())
				textDepth = -1
			}
			depth--
		}
	}
	require.Equal(t, "svg", root)
	return texts, paths
}

func lognormal(r *rand.Rand, n int, median, sigma float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = median * math.Exp(sigma*r.NormFloat64())
	}
	return s
}

func TestWriteCDF(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	var b bytes.Buffer
	require.NoError(t, report.WriteCDF(&b, "Pickup latency <1000/s>", []report.Series{
		{Name: "fila notify", SamplesMs: lognormal(r, 2000, 0.8, 0.4)},
		{Name: "river & co", SamplesMs: lognormal(r, 500, 400, 0.5)},
	}))
	texts, paths := svgDoc(t, b.Bytes())
	joined := strings.Join(texts, "\n")
	require.Contains(t, texts, "Pickup latency <1000/s>")
	require.Contains(t, joined, "fila notify")
	require.Contains(t, joined, "river & co")
	for _, label := range []string{"p50", "p90", "p99", "latency (ms, log scale)"} {
		require.Contains(t, texts, label)
	}
	require.Len(t, paths, 2)
	require.NotContains(t, b.String(), "<script")
	require.NotContains(t, b.String(), "@import")
}

func TestWriteCDFEmptyAndSingle(t *testing.T) {
	t.Parallel()
	for name, series := range map[string][]report.Series{
		"no series":   nil,
		"empty":       {{Name: "empty"}},
		"single":      {{Name: "single", SamplesMs: []float64{3}}},
		"zero":        {{Name: "zero", SamplesMs: []float64{0, 0}}},
		"not numbers": {{Name: "nan", SamplesMs: []float64{math.NaN(), math.Inf(1)}}},
		"mixed":       {{Name: "one", SamplesMs: []float64{0.5}}, {Name: "none"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			require.NoError(t, report.WriteCDF(&b, name, series))
			require.NotContains(t, b.String(), "NaN")
			require.NotContains(t, b.String(), "Inf")
			texts, _ := svgDoc(t, b.Bytes())
			joined := strings.Join(texts, "\n")
			for _, s := range series {
				require.Contains(t, joined, s.Name)
			}
		})
	}
}

func TestWriteCDFDownsamplesKeepingTail(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 3))
	samples := lognormal(r, 100_000, 1, 0.3)
	samples[12345] = 900 // one outlier far out in the tail
	var b bytes.Buffer
	require.NoError(t, report.WriteCDF(&b, "big", []report.Series{{Name: "big", SamplesMs: samples}}))
	require.Less(t, b.Len(), 40_000, "the SVG stays small")

	_, paths := svgDoc(t, b.Bytes())
	require.Len(t, paths, 1)
	pts := strings.Split(paths[0], " L")
	require.Less(t, len(pts), 500)
	require.Greater(t, len(pts), 50)

	// The path runs from fraction 0 (bottom) up to the outlier at fraction
	// 1 (top), and the point before the outlier is the bulk's own maximum:
	// thinning never averages the tail away, so the jump out to 900 ms is
	// one long segment.
	point := func(s string) (x, y float64) {
		_, err := fmt.Sscan(strings.TrimPrefix(s, "M"), &x, &y)
		require.NoError(t, err)
		return x, y
	}
	_, firstY := point(pts[0])
	lastX, lastY := point(pts[len(pts)-1])
	prevX, _ := point(pts[len(pts)-2])
	require.Less(t, lastY, firstY)
	require.Greater(t, lastX-prevX, 200.0)
}
