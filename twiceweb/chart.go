package twiceweb

import (
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// chart is the overview's throughput chart, laid out on the server and
// drawn as inline SVG: one stacked bar per minute, completed below and
// dead-lettered above.
type chart struct {
	Width, Height, Top, Bottom int
	Max                        int
	Bars                       []bar
	Ticks                      []tick
}

type bar struct {
	X, W                   int
	CompletedY, CompletedH int
	DeadY, DeadH           int
	Title                  string
}

type tick struct {
	X     int
	Label string
}

// throughputChart lays out n one-minute buckets starting at since.
func throughputChart(since time.Time, n int, buckets []twicestore.ThroughputBucket) chart {
	c := chart{Width: 720, Height: 170, Top: 10, Bottom: 150}
	byMinute := make([]twicestore.ThroughputBucket, n)
	for _, b := range buckets {
		if i := int(b.Start.Sub(since) / time.Minute); i >= 0 && i < n {
			byMinute[i] = b
		}
	}
	for _, b := range byMinute {
		c.Max = max(c.Max, b.Completed+b.Dead)
	}
	scale := c.Max
	if scale == 0 {
		scale = 1
	}
	left, step := 40, (c.Width-40)/n
	plot := c.Bottom - c.Top
	for i, b := range byMinute {
		x := left + i*step
		ch := b.Completed * plot / scale
		dh := b.Dead * plot / scale
		if b.Completed > 0 && ch == 0 {
			ch = 1
		}
		if b.Dead > 0 && dh == 0 {
			dh = 1
		}
		at := since.Add(time.Duration(i) * time.Minute).UTC().Format("15:04")
		c.Bars = append(c.Bars, bar{
			X: x, W: step - 2,
			CompletedY: c.Bottom - ch, CompletedH: ch,
			DeadY: c.Bottom - ch - dh, DeadH: dh,
			Title: fmt.Sprintf("%s UTC: %d completed, %d dead", at, b.Completed, b.Dead),
		})
		if i%10 == 0 {
			c.Ticks = append(c.Ticks, tick{X: x, Label: at})
		}
	}
	return c
}
