package mysql_test

import (
	"testing"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
)

// TestSourcesConformance runs the suite with the shop's tables in a
// database of their own on hourglass's server, reached by qualified name;
// the shop's sessions are in another time zone (+05:00) and write UTC.
func TestSourcesConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseSources(t, hourglasstest.SourceHarness{
		Open: func(t *testing.T) (a, b hourglasstest.SourceDB, shop hourglasstest.Shop) {
			url, shopURL := mytest.NewDatabase(t), mytest.NewDatabase(t)
			cfg, err := myurl.Parse(shopURL)
			if err != nil {
				t.Fatal(err)
			}
			return open(t, url, nil, false), open(t, url, nil, false), hourglasstest.Shop{DB: shopDB(t, shopURL), Schema: cfg.DBName}
		},
	})
}
