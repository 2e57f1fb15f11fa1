package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/quorumlock/redlock/chaos"
)

// labRun is everything a lab run reports: written as JSON as it is, as
// CSV (its points) and as the HTML report.
type labRun struct {
	Command     string           `json:"command"`
	Seed        uint64           `json:"seed"`
	Quick       bool             `json:"quick"`
	Started     time.Time        `json:"started"`
	Elapsed     time.Duration    `json:"elapsed_ns"`
	Machine     string           `json:"machine"`
	Server      string           `json:"server"`
	Experiments []labExperiment  `json:"experiments"`
	Points      []chaos.LabPoint `json:"points"`
}

// labExperiment is what the report says of one experiment.
type labExperiment struct {
	Name   string   `json:"name"`
	Title  string   `json:"title"`
	Fault  string   `json:"fault"`
	XLabel string   `json:"x_label"`
	TTL    string   `json:"ttl"`
	Setups []string `json:"setups"`
}

func (r labRun) pointsOf(name string) []chaos.LabPoint {
	var out []chaos.LabPoint
	for _, p := range r.Points {
		if p.Experiment == name {
			out = append(out, p)
		}
	}
	return out
}

var labCSVHeader = []string{"experiment", "setup", "x", "trials", "violations", "rate", "ci95_low", "ci95_high",
	"overlaps", "stale_writes", "lost_updates", "token_regressions", "unavailable", "skipped", "error"}

func writeLabCSV(w io.Writer, points []chaos.LabPoint) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(labCSVHeader)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	for _, p := range points {
		_ = cw.Write([]string{p.Experiment, p.Setup, strconv.FormatFloat(p.X, 'g', -1, 64),
			strconv.Itoa(p.Trials), strconv.Itoa(p.Violations), f(p.Rate), f(p.Low), f(p.High),
			strconv.Itoa(p.Overlaps), strconv.Itoa(p.StaleWrites), strconv.Itoa(p.LostUpdates),
			strconv.Itoa(p.Regressions), strconv.Itoa(p.Unavailable), p.Skipped, p.Err})
	}
	cw.Flush()
	return cw.Error()
}

func writeLabJSON(w io.Writer, r labRun) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// labChart draws one experiment's violation rates with their 95 %
// intervals: against the fault's size, one line per setup; or, for an
// experiment with one size, one row per setup. In the report the legend
// is the page's (seriesColor), not the chart's, so it never covers the data.
//
// embed puts the font in the chart, as the report's charts have it; the SVG
// files beside the report name it only (a viewer's serif font stands in),
// and carry gonum's legend, above the rates.
func labChart(ex labExperiment, points []chaos.LabPoint, embed bool) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = ex.Title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	var xs []float64
	for _, pt := range points {
		if !slices.Contains(xs, pt.X) {
			xs = append(xs, pt.X)
		}
	}
	w, h := vg.Points(720), vg.Points(340)
	if len(xs) == 1 {
		// One size: rows of setups, the rate along the x axis.
		p.X.Label.Text = "violation rate per trial (95 % interval)"
		p.X.Min, p.X.Max = 0, 1
		// The first setup on top: nominal rows count up from the bottom.
		names := make([]string, len(ex.Setups))
		for i, setup := range ex.Setups {
			row := len(ex.Setups) - 1 - i
			pt, ok := pointOf(points, setup, xs[0])
			if !ok || pt.Trials == 0 {
				names[row] = setup + " (not run)"
				continue
			}
			names[row] = setup
			xy := plotter.XYs{{X: pt.Rate, Y: float64(row)}}
			errs := plotter.XErrors{{Low: pt.Rate - pt.Low, High: pt.High - pt.Rate}}
			bars, err := plotter.NewXErrorBars(struct {
				plotter.XYs
				plotter.XErrors
			}{xy, errs})
			if err != nil {
				return "", err
			}
			bars.Color = seriesColor(0)
			bars.Width = vg.Points(1.5)
			dot, err := plotter.NewScatter(xy)
			if err != nil {
				return "", err
			}
			dot.GlyphStyle = draw.GlyphStyle{Color: seriesColor(0), Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
			p.Add(bars, dot)
		}
		p.NominalY(names...)
		p.Y.Min, p.Y.Max = -0.6, float64(len(names))-0.4
		h = vg.Points(60 + 28*float64(len(names)))
	} else {
		p.X.Label.Text = ex.XLabel
		p.Y.Label.Text = "violation rate per trial (95 % interval)"
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		// Each setup's points are nudged sideways a little, so that
		// intervals at one size do not hide each other.
		span := xs[len(xs)-1] - xs[0]
		for i, setup := range ex.Setups {
			var xy plotter.XYs
			var errs plotter.YErrors
			for _, pt := range points {
				if pt.Setup != setup || pt.Trials == 0 {
					continue
				}
				nudge := (float64(i) - float64(len(ex.Setups)-1)/2) * span * 0.006
				xy = append(xy, plotter.XY{X: pt.X + nudge, Y: pt.Rate})
				errs = append(errs, struct{ Low, High float64 }{pt.Rate - pt.Low, pt.High - pt.Rate})
			}
			if len(xy) == 0 {
				continue
			}
			line, dots, err := plotter.NewLinePoints(xy)
			if err != nil {
				return "", err
			}
			line.Color = seriesColor(i)
			line.Width = vg.Points(1.5)
			line.Dashes = plotutil.Dashes(i)
			dots.GlyphStyle = draw.GlyphStyle{Color: seriesColor(i), Radius: vg.Points(3), Shape: plotutil.Shape(i)}
			bars, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{xy, errs})
			if err != nil {
				return "", err
			}
			bars.Color = seriesColor(i)
			p.Add(line, dots, bars)
			if !embed {
				p.Legend.Add(setup, line, dots)
			}
		}
		p.X.Min, p.X.Max = min(0, xs[0])-span*0.02, xs[len(xs)-1]+span*0.02
		p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"}, {Value: 0.5, Label: "0.5"}, {Value: 0.75, Label: "0.75"}, {Value: 1, Label: "1"}})
		if !embed {
			// A file of its own has no page legend: gonum's goes above the
			// rates, in room of its own.
			p.Y.Max = 1 + 0.1*float64(len(ex.Setups))
			p.Legend.Top, p.Legend.Left = true, true
			p.Legend.XOffs = vg.Points(8)
		}
	}
	c := vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(embed))
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", err
	}
	svg := buf.String()
	if i := strings.Index(svg, "<svg"); i > 0 {
		svg = svg[i:] // drop the XML prolog: the chart goes inline in the page
	}
	svg = strings.Replace(svg, "<svg", fmt.Sprintf(`<svg class="chart" role="img" aria-label="%s"`, template.HTMLEscapeString(ex.Title)), 1)
	return template.HTML(svg), nil // #nosec: gonum's own SVG, with escaped text
}

func seriesColor(i int) color.Color { return plotutil.Color(i) }

// svgDefs matches the definitions gonum writes at the top of a chart: the
// embedded font.
var svgDefs = regexp.MustCompile(`(?s)<defs>.*?</defs>`)

func cssColor(i int) string {
	r, g, b, _ := seriesColor(i).RGBA()
	return fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8)
}

func pointOf(points []chaos.LabPoint, setup string, x float64) (chaos.LabPoint, bool) {
	for _, p := range points {
		if p.Setup == setup && p.X == x {
			return p, true
		}
	}
	return chaos.LabPoint{}, false
}

// percent writes a rate as a percentage, to the digit the trials allow.
func percent(v float64) string {
	return strconv.FormatFloat(100*v, 'f', 1, 64) + " %"
}

type labSection struct {
	labExperiment
	Chart  template.HTML
	Legend []labLegend // none when the chart names its rows
	Points []chaos.LabPoint
	Sweep  bool // more than one size of the fault
}

type labLegend struct {
	Setup, Color string
}

var labPage = template.Must(template.New("lab").Funcs(template.FuncMap{
	"pct": percent,
	"x":   func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>redlock lab</title>
<style>
body { font-family: sans-serif; margin: 2em auto; max-width: 980px; color: #222; line-height: 1.4; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.violated td.rate { color: #a33; font-weight: bold; }
tr.clean td.rate { color: #176f2c; }
ul.legend { list-style: none; padding: 0; margin: 0.3em 0 0.8em; }
ul.legend li { display: block; margin: 2px 0; font-size: 14px; }
ul.legend span.swatch { display: inline-block; width: 14px; height: 14px; margin-right: 6px; vertical-align: middle; }
svg.chart { display: block; margin: 0.5em 0; }
p.fault { color: #444; }
</style>
</head>
<body>
<h1>redlock lab</h1>
<p>Violation rates of mutual exclusion, per trial, with 95 % Wilson intervals, on real redis-server
processes on loopback. A trial is one holder and one contender on a fresh key: the holder takes
the lock, the fault strikes, the holder works and checks its validity (it stops when none is
left, as a correct holder does), then makes a read-modify-write on a protected resource; the
contender tries the lock every 2 ms and makes its own once it has it. A trial counts as a
violation when the two held the lock at once and the resource did not refuse the holder's
write (it does when it checks fencing tokens), or when a write landed out of order, an update
was lost, or a fencing token went back.</p>
<p>Command: <code>{{.Command}}</code>; seed {{.Seed}}{{if .Quick}} (quick run: few sizes, few trials){{end}};
machine: {{.Machine}}; {{.Server}}; started {{.Started.Format "2006-01-02 15:04 MST"}}, took {{.Elapsed}}.</p>
{{range .Sections}}{{$sec := .}}
<h2 id="{{.Name}}">{{.Title}}</h2>
<p class="fault">{{.Fault}}. TTL {{.TTL}}.</p>
{{.Chart}}
{{if .Legend}}<ul class="legend">{{range .Legend}}<li><span class="swatch" style="background: {{.Color}}"></span>{{.Setup}}</li>{{end}}</ul>{{end}}
<table>
<tr><th>setup</th>{{if .Sweep}}<th>{{.XLabel}}</th>{{end}}<th>trials</th><th>violations</th><th>rate</th><th>95 % interval</th><th>overlaps</th><th>stale writes</th><th>lost updates</th><th>token regressions</th><th>no lock</th><th>note</th></tr>
{{range .Points}}<tr class="{{if gt .Violations 0}}violated{{else}}clean{{end}}"><td>{{.Setup}}</td>{{if $sec.Sweep}}<td class="n">{{x .X}}</td>{{end}}<td class="n">{{.Trials}}</td><td class="n">{{.Violations}}</td><td class="n rate">{{pct .Rate}}</td><td class="n">{{pct .Low}} – {{pct .High}}</td><td class="n">{{.Overlaps}}</td><td class="n">{{.StaleWrites}}</td><td class="n">{{.LostUpdates}}</td><td class="n">{{.Regressions}}</td><td class="n">{{.Unavailable}}</td><td>{{.Skipped}}{{.Err}}</td></tr>
{{end}}</table>
{{end}}
</body>
</html>
`))

func writeLabHTML(w io.Writer, r labRun) error {
	var sections []labSection
	for _, ex := range r.Experiments {
		points := r.pointsOf(ex.Name)
		if len(points) == 0 {
			continue
		}
		chart, err := labChart(ex, points, true)
		if err != nil {
			return fmt.Errorf("chart of %s: %w", ex.Name, err)
		}
		if len(sections) > 0 {
			// The font is embedded in the first chart only: its
			// @font-face serves the whole page.
			chart = template.HTML(svgDefs.ReplaceAllString(string(chart), ""))
		}
		s := labSection{labExperiment: ex, Chart: chart, Points: points}
		for _, p := range points {
			s.Sweep = s.Sweep || p.X != points[0].X
		}
		if s.Sweep {
			for i, setup := range ex.Setups {
				s.Legend = append(s.Legend, labLegend{Setup: setup, Color: cssColor(i)})
			}
		}
		sections = append(sections, s)
	}
	return labPage.Execute(w, struct {
		labRun
		Sections []labSection
	}{r, sections})
}
