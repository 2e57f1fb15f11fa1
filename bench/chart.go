package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// writeChart draws throughput against N, one panel for workload K and one
// for workload C (one client), a line per library, as a self-contained SVG.
func writeChart(w io.Writer, results []*result) error {
	const (
		panelW, panelH = 420, 300
		left, top      = 60, 40
		plotW, plotH   = 320, 200
	)
	colors := map[string]string{
		"redlock": "#1b7837", "redsync": "#c51b7d", "redsync-2ms": "#e08214", "redislock": "#2166ac",
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", 2*panelW, panelH+40)
	for p, workload := range []string{"K", "C"} {
		x0 := p*panelW + left
		var series = map[string][][2]float64{}
		var maxY float64
		for _, r := range results {
			if r.Workload != workload || r.Clients != 1 || colors[r.Lib] == "" {
				continue
			}
			series[r.Lib] = append(series[r.Lib], [2]float64{float64(r.N), r.OpsPerS})
			maxY = max(maxY, r.OpsPerS)
		}
		if maxY == 0 {
			maxY = 1
		}
		title := map[string]string{"K": "K: 16 goroutines, a key each", "C": "C: 16 goroutines, one key"}[workload]
		fmt.Fprintf(&b, `<text x="%d" y="20" font-weight="bold">%s (ops/s against N)</text>`+"\n", x0, title)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, top, plotW, plotH)
		px := func(n float64) float64 { return float64(x0) + (n-1)/4*float64(plotW) }
		py := func(v float64) float64 { return float64(top+plotH) - v/maxY*float64(plotH) }
		for _, n := range []float64{1, 3, 5} {
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">N=%.0f</text>`+"\n", px(n), top+plotH+16, n)
		}
		for i := 0; i <= 4; i++ {
			v := maxY * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%.0f</text>`+"\n", x0-4, py(v)+4, v)
		}
		libs := make([]string, 0, len(series))
		for lib := range series {
			libs = append(libs, lib)
		}
		slices.Sort(libs)
		for i, lib := range libs {
			pts := series[lib]
			slices.SortFunc(pts, func(a, b [2]float64) int { return int(a[0] - b[0]) })
			var path []string
			for _, pt := range pts {
				path = append(path, fmt.Sprintf("%.1f,%.1f", px(pt[0]), py(pt[1])))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(pt[0]), py(pt[1]), colors[lib])
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(path, " "), colors[lib])
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">■ %s</text>`+"\n", x0+plotW-90, top+14+14*i, colors[lib], lib)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
