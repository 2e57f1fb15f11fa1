package main

import (
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writeChart draws throughput against N, one panel for workload K (ops/s)
// and one for workload C (sections/s, one client), a line per library, as
// a self-contained SVG (its font embedded). Each panel leaves room above
// its highest point for the legend, so that the legend covers no line.
func writeChart(w io.Writer, results []*result) error {
	const cols = 2
	width, height := vg.Points(860), vg.Points(340)
	c := vgsvg.NewWith(vgsvg.UseWH(width, height), vgsvg.EmbedFonts(true))
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 1, Cols: cols, PadX: vg.Points(20), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{nil, nil}}, tiles, dc)
	for i, workload := range []string{"K", "C"} {
		p, err := panel(workload, results)
		if err != nil {
			return err
		}
		p.Draw(canvases[0][i])
	}
	_, err := c.WriteTo(w)
	return err
}

// panel is one workload's chart.
func panel(workload string, results []*result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = map[string]string{"K": "K: 16 goroutines, a key each", "C": "C: 16 goroutines, one key, one client"}[workload]
	p.X.Label.Text = "N (nodes)"
	p.Y.Label.Text = map[string]string{"K": "lock + unlock per second (ops/s)", "C": "critical sections per second (sections/s)"}[workload]
	p.Add(plotter.NewGrid())
	series := map[string]plotter.XYs{}
	var top float64
	for _, r := range results {
		if r.Workload != workload || r.Clients != 1 || !slices.Contains(chartLibs, r.Lib) {
			continue
		}
		series[r.Lib] = append(series[r.Lib], plotter.XY{X: float64(r.N), Y: r.OpsPerS})
		top = max(top, r.OpsPerS)
	}
	libs := make([]string, 0, len(series))
	for lib := range series {
		libs = append(libs, lib)
	}
	slices.Sort(libs)
	for i, lib := range libs {
		pts := series[lib]
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, dots, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width, line.Dashes = plotutil.Color(i), vg.Points(1.5), plotutil.Dashes(i)
		dots.GlyphStyle = draw.GlyphStyle{Color: plotutil.Color(i), Radius: vg.Points(3), Shape: plotutil.Shape(i)}
		p.Add(line, dots)
		p.Legend.Add(lib, line, dots)
	}
	p.X.Min, p.X.Max = 0.8, 5.2
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 3, Label: "3"}, {Value: 5, Label: "5"}})
	// Room above the lines for the legend: one row per library.
	p.Y.Min, p.Y.Max = 0, max(top, 1)*(1.15+0.09*float64(len(libs)))
	p.Y.Tick.Marker = roundTicks{}
	p.Legend.Top, p.Legend.Left = true, false
	p.Legend.XOffs = -vg.Points(6)
	return p, nil
}

// chartLibs are the libraries the chart compares (the kinds and the
// unbatched variant are in the table).
var chartLibs = []string{"redlock", "redsync", "redsync-2ms", "redislock", "rueidislock"}

// roundTicks are gonum's ticks labelled as whole numbers with thousands
// separators: 7,500 rather than 7500.00.
type roundTicks struct{}

func (roundTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = thousands(int64(math.Round(ticks[i].Value)))
		}
	}
	return ticks
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
