package postgres_test

import (
	"database/sql"
	"testing"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestSourcesConformance runs the suite with the shop's tables in schema
// shop and hourglass's in schema hourglass of one database.
func TestSourcesConformance(t *testing.T) {
	t.Parallel()
	hourglasstest.ExerciseSources(t, hourglasstest.SourceHarness{
		Open: func(t *testing.T) (a, b hourglasstest.SourceDB, shop hourglasstest.Shop) {
			url := pgtest.NewDatabase(t)
			db, err := sql.Open("pgx", url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return openSchema(t, url, "hourglass"), openSchema(t, url, "hourglass"), hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
		},
	})
}
