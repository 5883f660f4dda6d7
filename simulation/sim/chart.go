package sim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	stdfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// policyColor gives every policy one colour in every chart: kv's family green/blue, the
// cache-blind baselines warm or purple.
var policyColor = map[string]color.RGBA{
	PolicyKV:             {R: 0x1b, G: 0x9e, B: 0x77, A: 0xff}, // green
	PolicyKVApprox:       {R: 0x66, G: 0xa6, B: 0x1e, A: 0xff},
	PolicyKVPredict:      {R: 0x2c, G: 0x7f, B: 0xb8, A: 0xff},
	PolicyKVInstant:      {R: 0x55, G: 0x55, B: 0x55, A: 0xff}, // grey
	PolicyTTFTSim:        {R: 0x08, G: 0x51, B: 0x9c, A: 0xff}, // dark blue
	PolicyTTFTSimPredict: {R: 0x6b, G: 0xae, B: 0xd6, A: 0xff}, // light blue
	PolicyTTFT:           {R: 0x08, G: 0x30, B: 0x6b, A: 0xff}, // navy
	PolicyTTFTPredict:    {R: 0x42, G: 0x92, B: 0xc6, A: 0xff}, // mid blue
	PolicyRoundRobin:     {R: 0xd9, G: 0x5f, B: 0x02, A: 0xff}, // orange
	PolicyRandom:         {R: 0xe7, G: 0x29, B: 0x8a, A: 0xff},
	PolicyLeastLoaded:    {R: 0x75, G: 0x70, B: 0xb3, A: 0xff}, // purple
}

// policyNote says in a few words what a policy is, for the chart's legend line.
var policyNote = map[string]string{
	PolicyKV:             "kvrouter's KV-aware routing",
	PolicyKVApprox:       "KV-aware without engine events",
	PolicyKVPredict:      "KV-aware + predicted prefixes",
	PolicyKVInstant:      "KV-aware fed events instantly",
	PolicyTTFTSim:        "predicted time to first token, self-calibrating",
	PolicyTTFTSimPredict: "predicted TTFT + predicted prefixes",
	PolicyTTFT:           "cost_model ttft, calibrated by the store",
	PolicyTTFTPredict:    "cost_model ttft + predicted prefixes",
	PolicyRoundRobin:     "cache-blind, in turn",
	PolicyRandom:         "cache-blind, at random",
	PolicyLeastLoaded:    "cache-blind, fewest active requests",
}

// Chart geometry.
const (
	chartWidth = 32 * vg.Centimeter
	rowHeight  = 8.6 * vg.Centimeter
	margin     = 0.5 * vg.Centimeter
	// panelDataWidth approximates the data area of one of a row's three panels (the row's width
	// less margins, gaps and a y axis), for sizing bars.
	panelDataWidth = (chartWidth-2*margin-2*vg.Centimeter)/3 - 1.8*vg.Centimeter
)

var (
	sansFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	boldFont = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: stdfont.WeightBold}
)

// WriteChart draws the demo chart: a header stating the finding (Headline), the trace, the fleet
// and what the load means; then one row per report (a load level) with three bar panels — mean and
// p99 time to first token (lower is better) and the prefix-cache hit rate (higher is better, with
// the infinite-cache bound marked). The file's extension picks the format: .png or .svg.
func WriteChart(path string, reps []*Report) error {
	if len(reps) == 0 {
		return fmt.Errorf("chart: no reports")
	}
	header := headerLines(reps)
	headerH := margin
	for _, l := range header {
		headerH += l.height()
	}
	rows := make([][]*plot.Plot, 0, len(reps))
	for _, rep := range reps {
		row, err := reportRow(rep)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	height := headerH + rowHeight*vg.Length(len(reps))
	var canvas vg.CanvasSizer
	var write func(f *os.File) error
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		c := vgsvg.New(chartWidth, height)
		canvas = c
		write = func(f *os.File) error { _, err := c.WriteTo(f); return err }
	case ".png":
		c := vgimg.NewWith(vgimg.UseWH(chartWidth, height), vgimg.UseDPI(110))
		canvas = c
		write = func(f *os.File) error { _, err := vgimg.PngCanvas{Canvas: c}.WriteTo(f); return err }
	default:
		return fmt.Errorf("chart: %s: the extension must be .png or .svg", path)
	}
	dc := draw.New(canvas)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	y := dc.Max.Y - margin
	for _, l := range header {
		l.draw(&dc, dc.Min.X+margin, y)
		y -= l.height()
	}
	rowHead := textStyle(boldFont, 12.5, color.Black)
	for i, rep := range reps {
		top := dc.Max.Y - headerH - rowHeight*vg.Length(i)
		headerLine{rowTitle(rep), rowHead}.draw(&dc, dc.Min.X+margin, top)
		headH := headerLine{"", rowHead}.height()
		row := draw.Crop(dc, 0, 0, top-rowHeight-dc.Min.Y, top-headH-dc.Max.Y)
		tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Centimeter, PadTop: vg.Centimeter / 4,
			PadBottom: vg.Centimeter / 2, PadLeft: margin, PadRight: margin}
		cs := plot.Align([][]*plot.Plot{rows[i]}, tiles, row)
		for j := range rows[i] {
			rows[i][j].Draw(cs[0][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// headerLine is one line of text above the panels.
type headerLine struct {
	text  string
	style text.Style
}

func (l headerLine) height() vg.Length { return l.style.Font.Size * 1.45 }

func (l headerLine) draw(c *draw.Canvas, x, top vg.Length) {
	c.FillText(l.style, vg.Point{X: x, Y: top}, l.text)
}

func textStyle(f font.Font, size vg.Length, col color.Color) text.Style {
	return text.Style{Color: col, Font: font.From(f, size), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YTop}
}

// headerLines are the headline (wrapped to the chart's width) and the lines that name the trace,
// the fleet, the load and the policies.
func headerLines(reps []*Report) []headerLine {
	head := textStyle(boldFont, 17, color.Black)
	sub := textStyle(sansFont, 10.5, color.Gray{Y: 0x30})
	var lines []headerLine
	for _, s := range wrap(Headline(reps)+".", head, chartWidth-2*margin) {
		lines = append(lines, headerLine{s, head})
	}
	rep := reps[0]
	arrivals := fmt.Sprintf("arrivals %s faster than recorded", speedups(reps))
	if rep.Speedup == 0 {
		arrivals = "Poisson arrivals"
	}
	ideas := []string{
		fmt.Sprintf("Simulated: the %s, %s requests (mean prompt %s tokens), %s, routed to %d engines",
			rep.Trace, thousands(rep.Requests), thousands(int(rep.MeanInputTokens+0.5)), arrivals, rep.Workers),
		fmt.Sprintf("(vLLM-like, Llama-3.1-8B on one H100 each: %s-token KV cache, %d-token blocks, %s prompt tokens/s of prefill).",
			thousands(rep.Engine.KVTokens), rep.EngineBlock, thousands(int(rep.Engine.PrefillTokensPerS+0.5))),
		"Offered prefill load (ρ0) = prompt tokens arriving per second ÷ the fleet's prefill capacity, counting every prompt in full:",
		"at 100 % a fleet that caches nothing is saturated; every prompt token found in a cache is work saved.",
		"Policies: " + policyLegend(rep) + ".",
	}
	lines = append(lines, headerLine{"", textStyle(sansFont, 4, color.Black)})
	for _, idea := range ideas {
		for _, s := range wrap(idea, sub, chartWidth-2*margin) {
			lines = append(lines, headerLine{s, sub})
		}
	}
	return append(lines, headerLine{"", textStyle(sansFont, 8, color.Black)})
}

// wrap breaks s into lines no wider than width in style sty.
func wrap(s string, sty text.Style, width vg.Length) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		next := w
		if line != "" {
			next = line + " " + w
		}
		if line != "" && sty.Width(next) > width {
			lines = append(lines, line)
			next = w
		}
		line = next
	}
	return append(lines, line)
}

func policyLegend(rep *Report) string {
	parts := make([]string, 0, len(rep.Policies))
	for _, p := range rep.Policies {
		if note := policyNote[p.Policy]; note != "" {
			parts = append(parts, p.Policy+" = "+note)
		} else {
			parts = append(parts, p.Policy)
		}
	}
	return strings.Join(parts, "; ")
}

// speedups lists the reports' distinct speedups: "3.0×" or "3.0× and 4.2×".
func speedups(reps []*Report) string {
	var out []string
	for _, r := range reps {
		s := fmt.Sprintf("%.1f×", r.Speedup)
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return strings.Join(out, " and ")
}

// thousands formats n with thin-space-free comma grouping: 12031 → "12,031".
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// rowTitle names a report's load level above its panels.
func rowTitle(rep *Report) string {
	s := fmt.Sprintf("At %.0f %% offered prefill load (ρ0 %.2f; prefill + decode work %.0f %%", 100*rep.Rho0, rep.Rho0, 100*rep.RhoWork)
	if rep.Speedup > 0 {
		s += fmt.Sprintf(", arrivals %.1f× faster than recorded", rep.Speedup)
	}
	return s + ")"
}

// reportRow is one load level's three panels.
func reportRow(rep *Report) ([]*plot.Plot, error) {
	kv := rep.Policy(PolicyKV)
	ttft := func(get func(*PolicyResult) float64, what string) (*plot.Plot, error) {
		vals := make([]float64, len(rep.Policies))
		labels := make([]string, len(rep.Policies))
		for i := range rep.Policies {
			p := &rep.Policies[i]
			vals[i] = get(p) / 1000
			labels[i] = secs(get(p))
			if kv != nil && p.Policy != PolicyKV && get(kv) > 0 {
				labels[i] += "\n" + ratioToKV(get(p)/get(kv))
			}
		}
		return barPlot(rep, what+" time to first token", "seconds (lower is better)", vals, labels, nil)
	}
	mean, err := ttft(func(p *PolicyResult) float64 { return p.TTFT.Mean }, "Mean")
	if err != nil {
		return nil, err
	}
	p99, err := ttft(func(p *PolicyResult) float64 { return p.TTFT.P99 }, "99th-percentile (p99)")
	if err != nil {
		return nil, err
	}
	vals := make([]float64, len(rep.Policies))
	labels := make([]string, len(rep.Policies))
	for i, p := range rep.Policies {
		vals[i] = 100 * p.BlockHitRate
		labels[i] = fmt.Sprintf("%.1f %%", 100*p.BlockHitRate)
	}
	hits, err := barPlot(rep, "Prompt blocks found in the engines' KV caches", "% of prompt blocks (higher is better)", vals, labels,
		&bound{value: 100 * rep.ReuseBound.Blocks, label: "max. possible (infinite cache)"})
	if err != nil {
		return nil, err
	}
	return []*plot.Plot{mean, p99, hits}, nil
}

// ratioToKV labels a baseline's bar: "2.5× kv's".
func ratioToKV(r float64) string {
	if r >= 1/sameWithin && r <= sameWithin {
		return "≈ kv"
	}
	return times(r) + " kv's"
}

// bound is an upper limit drawn on a bar panel: a dashed line when it fits a scale that the bars
// still fill, otherwise a note at the top that it is off the scale.
type bound struct {
	value float64
	label string
}

// barPlot draws one bar per policy of rep with a value label above each.
func barPlot(rep *Report, title, ylabel string, vals []float64, labels []string, b *bound) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(boldFont, 11)
	p.Y.Label.Text = ylabel
	p.Y.Label.TextStyle.Font = font.From(sansFont, 10)
	p.X.Tick.Label.Font = font.From(sansFont, 10)
	// Bars share a panel about a third of the chart wide: narrower bars, smaller labels and slanted
	// policy names when there are many.
	n := len(rep.Policies)
	barWidth := min(1.6*vg.Centimeter, 0.62*panelDataWidth/vg.Length(n))
	labelSize := vg.Length(10)
	if n > 4 {
		labelSize = 8
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.Y.Tick.Label.Font = font.From(sansFont, 9)
	p.Y.Min = 0
	p.Y.Tick.Marker = shortTicks{}
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0 // bars need no vertical lines
	p.Add(grid)
	names := make([]string, len(rep.Policies))
	ymax := 0.0
	for i, pr := range rep.Policies {
		names[i] = pr.Policy
		bar, err := plotter.NewBarChart(plotter.Values{vals[i]}, barWidth)
		if err != nil {
			return nil, err
		}
		bar.XMin = float64(i)
		bar.Color = policyColor[pr.Policy]
		bar.LineStyle.Width = 0
		p.Add(bar)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(i), Y: vals[i]}}, Labels: []string{labels[i]}})
		if err != nil {
			return nil, err
		}
		for k := range lbl.TextStyle {
			lbl.TextStyle[k].Font = font.From(sansFont, labelSize)
			lbl.TextStyle[k].XAlign = draw.XCenter
			lbl.TextStyle[k].YAlign = draw.YBottom
		}
		lbl.Offset.Y = vg.Points(3)
		p.Add(lbl)
		ymax = max(ymax, vals[i])
	}
	// Headroom for the two-line labels above the bars.
	p.Y.Max = ymax*1.3 + 1e-9
	if b != nil && b.value > 0 {
		p.Legend.TextStyle.Font = font.From(sansFont, 9.5)
		p.Legend.Top = true
		if b.value <= p.Y.Max*1.5 { // fits without flattening the bars
			p.Y.Max = max(p.Y.Max, b.value*1.12)
			line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: b.value}, {X: float64(len(vals)) - 0.5, Y: b.value}})
			if err != nil {
				return nil, err
			}
			line.Color = color.Gray{Y: 0x40}
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s: %.1f %%", b.label, b.value), line)
		} else {
			p.Legend.ThumbnailWidth = 0
			p.Legend.Add(fmt.Sprintf("%s: %.1f %% (off scale)", b.label, b.value), noThumb{})
		}
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(vals))-0.5
	return p, nil
}

// noThumb is a legend entry without a symbol (a note).
type noThumb struct{}

func (noThumb) Thumbnail(*draw.Canvas) {}

// shortTicks are plot.DefaultTicks labelled without trailing zeros ("25", not "25.00").
type shortTicks struct{}

func (shortTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 6, 64)
		}
	}
	return ticks
}

func secs(ms float64) string {
	switch {
	case ms < 10_000:
		return fmt.Sprintf("%.2f s", ms/1000)
	case ms < 100_000:
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f s", ms/1000)
}
