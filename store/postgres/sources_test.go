package postgres_test

import (
	"testing"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/store/storetest"
)

// TestSourcesConformance runs the suite with the shop's tables in schema
// shop and hourglass's in schema hourglass of one database.
func TestSourcesConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseSources(t, hourglasstest.SourceHarness{
		Open: func(t *testing.T) (a, b hourglasstest.SourceDB, shop hourglasstest.Shop) {
			url := pgtest.NewDatabaseFrom(t, storetest.PostgresMigrated("hourglass"))
			db := pgtest.Open(t, url)
			return openSchema(t, url, "hourglass"), openSchema(t, url, "hourglass"), hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
		},
	})
}
