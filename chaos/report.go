package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes results as an aligned table, one row a scenario.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tsafe?\tassumption broken\tsections\toverlaps\tstale writes\tlost updates\tlinearizable\ttoken regressions\trefused writes\tover K\tout of order\tduring fault\ttime\tresult")
	for _, r := range results {
		fmt.Fprintln(tw, formatRow(r))
	}
	return tw.Flush()
}

func formatRow(r Result) string {
	safe, assumption := "unsafe", r.Assumption
	if r.Safe {
		safe, assumption = "safe", "-"
	}
	if r.Skipped != "" {
		return strings.Join([]string{r.Scenario, safe, assumption, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "skipped: " + r.Skipped}, "\t")
	}
	lin := "yes"
	switch {
	case r.Unknown:
		lin = "unknown"
	case !r.Linearizable:
		lin = "no"
	}
	return strings.Join([]string{
		r.Scenario, safe, assumption,
		fmt.Sprint(r.Sections), fmt.Sprint(r.Overlaps), fmt.Sprint(r.StaleWrites), fmt.Sprint(r.LostUpdates),
		lin, fmt.Sprint(r.Regressions), fmt.Sprint(r.Refused), fmt.Sprint(r.Excess), fmt.Sprint(r.OutOfOrder),
		fmt.Sprint(r.DuringFault), r.Elapsed.Round(10 * time.Millisecond).String(), outcome(r),
	}, "\t")
}

func outcome(r Result) string {
	switch {
	case r.Pass() && r.Safe:
		return "ok: no violation"
	case r.Pass():
		return "ok: violation shown"
	default:
		return "FAIL: " + failure(r)
	}
}

// failure says why a result does not pass.
func failure(r Result) string {
	switch {
	case r.Err != "":
		return r.Err
	case r.Safe && r.Violations() > 0:
		return fmt.Sprintf("%d violations in a safe configuration", r.Violations())
	case r.Safe && r.Sections == 0:
		return "no critical section completed"
	case r.Safe && r.DuringFault == 0:
		return "no progress while the fault was in force"
	case r.Safe && r.Refused < r.MinRefused:
		return "the fenced register refused no stale write: the fence was never put to the test"
	case !r.Safe && r.Violations() == 0:
		return "the unsafe configuration showed no violation"
	}
	return ""
}
