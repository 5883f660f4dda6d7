package sim

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// policyColor gives every policy one colour in every chart.
var policyColor = map[string]color.RGBA{
	PolicyKV:          {R: 0x1b, G: 0x9e, B: 0x77, A: 0xff}, // green
	PolicyKVApprox:    {R: 0x66, G: 0xa6, B: 0x1e, A: 0xff},
	PolicyKVPredict:   {R: 0x2c, G: 0x7f, B: 0xb8, A: 0xff},
	PolicyRoundRobin:  {R: 0xd9, G: 0x5f, B: 0x02, A: 0xff}, // orange
	PolicyRandom:      {R: 0xe7, G: 0x29, B: 0x8a, A: 0xff},
	PolicyLeastLoaded: {R: 0x75, G: 0x70, B: 0xb3, A: 0xff}, // purple
	PolicyOracle:      {R: 0x55, G: 0x55, B: 0x55, A: 0xff}, // grey
}

// WriteChart draws one row per report (a load level): the TTFT distribution of every policy as a
// CDF on a log time axis, and the policies' prefix-cache hit rates as bars. The file's extension
// picks the format: .png or .svg.
func WriteChart(path string, reps []*Report) error {
	if len(reps) == 0 {
		return fmt.Errorf("chart: no reports")
	}
	rows := make([][]*plot.Plot, 0, len(reps))
	for _, rep := range reps {
		cdf, err := ttftPlot(rep)
		if err != nil {
			return err
		}
		bars, err := hitPlot(rep)
		if err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{cdf, bars})
	}
	const rowH, width = 9 * vg.Centimeter, 30 * vg.Centimeter
	height := rowH * vg.Length(len(reps))
	var canvas interface {
		vg.CanvasSizer
	}
	var write func(f *os.File) error
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		c := vgsvg.New(width, height)
		canvas = c
		write = func(f *os.File) error { _, err := c.WriteTo(f); return err }
	case ".png":
		c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))
		canvas = c
		write = func(f *os.File) error { _, err := vgimg.PngCanvas{Canvas: c}.WriteTo(f); return err }
	default:
		return fmt.Errorf("chart: %s: the extension must be .png or .svg", path)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: len(reps), Cols: 2, PadX: vg.Centimeter, PadY: vg.Centimeter / 2,
		PadTop: vg.Centimeter / 3, PadBottom: vg.Centimeter / 3, PadLeft: vg.Centimeter / 3, PadRight: vg.Centimeter / 3}
	cs := plot.Align(rows, tiles, dc)
	for i := range rows {
		for j := range rows[i] {
			rows[i][j].Draw(cs[i][j])
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

func loadLabel(rep *Report) string {
	return fmt.Sprintf("rho0 %.2f, %d workers, %d requests", rep.Rho0, rep.Workers, rep.Requests)
}

// ttftPlot is the TTFT CDF of every policy of rep.
func ttftPlot(rep *Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "TTFT distribution (" + loadLabel(rep) + ")"
	p.X.Label.Text = "time to first token, s (log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YPosition = draw.PosBottom
	p.Add(plotter.NewGrid())
	xmin, xmax := 0.0, 0.0
	for _, pr := range rep.Policies {
		xs := pr.TTFTs()
		if len(xs) == 0 {
			continue
		}
		pts := cdfPoints(xs, 400)
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.Color = policyColor[pr.Policy]
		line.Width = vg.Points(2)
		if pr.Policy == PolicyOracle {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s: mean %s, p99 %s", pr.Policy, secs(pr.TTFT.Mean), secs(pr.TTFT.P99)), line)
		if xmin == 0 || pts[0].X < xmin {
			xmin = pts[0].X
		}
		xmax = max(xmax, pts[len(pts)-1].X)
	}
	if xmin > 0 {
		p.X.Min, p.X.Max = xmin*0.8, xmax*1.25
	}
	return p, nil
}

func secs(ms float64) string {
	if ms < 10_000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.0f s", ms/1000)
}

// cdfPoints samples the empirical CDF of sorted xs (ms) at about n points, in seconds.
func cdfPoints(xs []float64, n int) plotter.XYs {
	if !slices.IsSorted(xs) {
		xs = slices.Clone(xs)
		slices.Sort(xs)
	}
	step := max(1, len(xs)/n)
	pts := make(plotter.XYs, 0, n+2)
	for i := 0; i < len(xs); i += step {
		pts = append(pts, plotter.XY{X: max(xs[i], 1e-3) / 1000, Y: float64(i+1) / float64(len(xs))})
	}
	pts = append(pts, plotter.XY{X: max(xs[len(xs)-1], 1e-3) / 1000, Y: 1})
	return pts
}

// hitPlot shows every policy's block hit rate, with the oracle's and the infinite-cache bound named
// in the title.
func hitPlot(rep *Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("prefix-cache hit rate (infinite-cache bound %.1f %%)", 100*rep.ReuseBound.Blocks)
	p.Y.Label.Text = "prompt blocks served from cache, %"
	p.Y.Min = 0
	names := make([]string, len(rep.Policies))
	ymax := 0.0
	for i, pr := range rep.Policies {
		names[i] = pr.Policy
		v := plotter.Values{100 * pr.BlockHitRate}
		bar, err := plotter.NewBarChart(v, vg.Centimeter)
		if err != nil {
			return nil, err
		}
		bar.XMin = float64(i)
		bar.Color = policyColor[pr.Policy]
		bar.LineStyle.Width = 0
		p.Add(bar)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(i), Y: 100 * pr.BlockHitRate}},
			Labels: []string{fmt.Sprintf("%.1f %%", 100*pr.BlockHitRate)}})
		if err != nil {
			return nil, err
		}
		for k := range lbl.TextStyle {
			lbl.TextStyle[k].XAlign = draw.XCenter
			lbl.Offset.Y = vg.Points(3)
		}
		p.Add(lbl)
		ymax = max(ymax, 100*pr.BlockHitRate)
	}
	p.Y.Max = ymax*1.2 + 0.5
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	return p, nil
}
