package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quorumlock/redlock/chaos"
)

// labServers fails in CI and skips elsewhere without redis-server.
func labServers(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts redis-server nodes")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no redis-server: the lab needs it")
		}
		t.Skip("no redis-server")
	}
}

// TestLab runs a small lab (two experiments, two trials a point) and checks
// its three files, then the report in headless Chromium.
func TestLab(t *testing.T) {
	labServers(t)
	dir := t.TempDir()
	exit, stdout, stderr := runCmd(t, "lab", "--quick", "--trials", "2", "--seed", "3",
		"--only", "client-pause,crash-majority", "--out", dir)
	if exit != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
	}
	for _, want := range []string{"seed 3", "points in"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	for _, want := range []string{"client-pause", "Redlock N=3, FencedSet", "single node, no persistence", "95 % interval", "report.html (seed 3)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}

	var points []chaos.LabPoint
	want := 0
	for _, ex := range chaos.Experiments() {
		if ex.Name == "client-pause" || ex.Name == "crash-majority" {
			want += len(ex.Setups) * len(ex.QuickXs)
			if len(ex.QuickXs) == 0 {
				want += len(ex.Setups) * len(ex.Xs)
			}
		}
	}
	t.Run("points.json", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(dir, "points.json"))
		if err != nil {
			t.Fatal(err)
		}
		var run labRun
		if err := json.Unmarshal(b, &run); err != nil {
			t.Fatal(err)
		}
		points = run.Points
		if run.Seed != 3 || !run.Quick || len(run.Experiments) != 2 || len(points) != want {
			t.Fatalf("seed %d, quick %v, %d experiments, %d points (want %d)", run.Seed, run.Quick, len(run.Experiments), len(points), want)
		}
		for _, p := range points {
			if p.Err != "" || p.Trials != 2 || p.Low > p.Rate || p.Rate > p.High {
				t.Errorf("point %+v", p)
			}
		}
	})
	t.Run("points.csv", func(t *testing.T) {
		f, err := os.Open(filepath.Join(dir, "points.csv"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		rows, err := csv.NewReader(f).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != want+1 || strings.Join(rows[0], ",") != strings.Join(labCSVHeader, ",") {
			t.Fatalf("%d rows, header %v", len(rows), rows[0])
		}
	})
	t.Run("renders in headless Chromium", func(t *testing.T) {
		checkReportInChromium(t, filepath.Join(dir, "report.html"), 2)
	})
}

// checkReportInChromium opens the report, checks that charts charts
// rendered with their axes and their embedded font, that no text of a
// chart overlaps another and that no legend covers a chart, and keeps a
// screenshot of the page as the test's artifact (go test -artifacts).
func checkReportInChromium(t *testing.T, report string, charts int) {
	t.Helper()
	res, shot := inspectPage(t, report)
	if res.Charts != charts || len(res.Bare) > 0 {
		t.Errorf("%d charts rendered (want %d); without axes or data: %v", res.Charts, charts, res.Bare)
	}
	if !res.Font {
		t.Error("the charts' embedded font is not loaded")
	}
	if len(res.Overlaps) > 0 {
		t.Errorf("text overlaps in the charts: %v", res.Overlaps)
	}
	if len(res.Covered) > 0 {
		t.Errorf("legends over the charts: %v", res.Covered)
	}
	path := filepath.Join(t.ArtifactDir(), "lab-report.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(shot) < 20_000 {
		t.Errorf("screenshot of %d bytes: want a page with charts", len(shot))
	}
	t.Logf("screenshot: %s", path)
}

// TestInspectPage_findsOverlapsAndCoveredCharts: the layout check sees
// text drawn over text, a legend over its chart and a chart with no axes.
func TestInspectPage_findsOverlapsAndCoveredCharts(t *testing.T) {
	page := filepath.Join(t.TempDir(), "bad.html")
	html := `<!DOCTYPE html><html><body>
<svg class="chart" aria-label="crowded" width="400" height="200"><path d="M0 0L10 10"/><path d="M0 0L10 10"/><path d="M0 0L10 10"/><path d="M0 0L10 10"/><path d="M0 0L10 10"/>
<text x="20" y="50">rate</text><text x="30" y="52">legend over it</text><text x="200" y="150">a</text><text x="300" y="150">b</text></svg>
<ul class="legend" style="margin-top: -150px"><li>setup</li></ul>
<svg class="chart" aria-label="empty" width="400" height="200"></svg>
</body></html>`
	if err := os.WriteFile(page, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _ := inspectPage(t, page)
	if res.Charts != 2 || len(res.Overlaps) != 1 || !strings.Contains(res.Overlaps[0], "legend over it") ||
		len(res.Covered) != 1 || res.Covered[0] != "crowded" || len(res.Bare) != 1 || res.Bare[0] != "empty" {
		t.Fatalf("%+v", res)
	}
}

// pageLayout is what inspectPage found.
type pageLayout struct {
	Charts   int      `json:"charts"`
	Bare     []string `json:"bare"`     // charts too small, or with too little drawn
	Overlaps []string `json:"overlaps"` // pairs of texts of one chart that overlap
	Covered  []string `json:"covered"`  // charts whose legend lies over them
	Font     bool     `json:"font"`     // the charts' font is loaded
}

// inspectPage opens page in headless Chromium and returns its layout and
// a screenshot of the whole page.
func inspectPage(t *testing.T, page string) (pageLayout, []byte) {
	t.Helper()
	browser := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no chromium to render the report (apt-get install chromium)")
		}
		t.Skip("no chromium (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")), chromedp.WindowSize(1100, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelT()

	const inspect = `(async () => {
  await document.fonts.ready;
  const out = {charts: 0, bare: [], overlaps: [], covered: [], font: document.fonts.check('12px "Liberation Serif"')};
  const hit = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  for (const svg of document.querySelectorAll('svg.chart')) {
    out.charts++;
    const box = svg.getBoundingClientRect();
    const name = svg.getAttribute('aria-label');
    const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim() !== '')
      .map(t => ({s: t.textContent, r: t.getBoundingClientRect()}));
    if (box.width < 300 || box.height < 100 || svg.querySelectorAll('path').length < 5 || texts.length < 4) out.bare.push(name);
    for (let i = 0; i < texts.length; i++)
      for (let j = i + 1; j < texts.length; j++)
        if (hit(texts[i].r, texts[j].r)) out.overlaps.push(name + ': "' + texts[i].s + '" and "' + texts[j].s + '"');
    const legend = svg.nextElementSibling;
    if (legend && legend.matches('ul.legend') && hit(legend.getBoundingClientRect(), box)) out.covered.push(name);
  }
  return out;
})()`
	if _, err := chromedp.Run(ctx, chromedp.Navigate("file://"+page)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[pageLayout](inspect, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
	if err != nil {
		t.Fatalf("chromium screenshot: %v", err)
	}
	return res, shot
}

// TestLab_from: --from writes the report, the CSV and one chart per
// experiment again from an earlier run's points.json, without redis-server.
func TestLab_from(t *testing.T) {
	run := labRun{Command: "redlock lab", Seed: 9, Started: time.Now(), Machine: "test", Server: "none",
		Experiments: []labExperiment{
			{Name: "sweep", Title: "A swept fault", Fault: "something", XLabel: "size ÷ TTL", TTL: "300ms", Setups: []string{"one", "two"}},
			{Name: "single", Title: "A fault of one size", Fault: "something else", XLabel: "configuration", TTL: "300ms", Setups: []string{"a", "b", "c"}},
		}}
	for i, x := range []float64{0, 0.5, 1, 2} {
		for j, setup := range []string{"one", "two"} {
			k := min(i*j*10, 30)
			low, high := chaos.Wilson(k, 30)
			run.Points = append(run.Points, chaos.LabPoint{Experiment: "sweep", Setup: setup, X: x, Trials: 30, Violations: k, Rate: float64(k) / 30, Low: low, High: high})
		}
	}
	for i, setup := range []string{"a", "b", "c"} {
		low, high := chaos.Wilson(i*10, 30)
		run.Points = append(run.Points, chaos.LabPoint{Experiment: "single", Setup: setup, X: 1, Trials: 30, Violations: i * 10, Rate: float64(i) / 3, Low: low, High: high})
	}
	dir := t.TempDir()
	from := filepath.Join(dir, "earlier.json")
	b, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(from, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	exit, stdout, stderr := runCmd(t, "lab", "--from", from, "--out", out)
	if exit != 0 || !strings.Contains(stdout, "report: ") {
		t.Fatalf("exit %d\n%s%s", exit, stdout, stderr)
	}
	for _, name := range []string{"report.html", "points.csv", "points.json", "sweep.svg", "single.svg"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(out, "sweep.svg"))
	if !strings.Contains(string(svg), ">two<") {
		t.Error("the sweep's SVG file has no legend naming its setups")
	}
	t.Run("renders in headless Chromium", func(t *testing.T) {
		checkReportInChromium(t, filepath.Join(out, "report.html"), 2)
	})
}
