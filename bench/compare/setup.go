package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// inBatches calls insert with item(0) … item(n-1), size at a time: the
// batched inserts every workload's set-up makes, on either system.
func inBatches[T any](n, size int, item func(i int) T, insert func([]T) error) error {
	batch := make([]T, 0, size)
	for i := range n {
		batch = append(batch, item(i))
		if len(batch) == size || i == n-1 {
			if err := insert(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// openRiver connects to River's schema at u and migrates it; the caller
// closes the pool.
func openRiver(ctx context.Context, u string) (*pgxpool.Pool, *riverpgxv5.Driver, error) {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, nil, err
	}
	driver := riverpgxv5.New(pool)
	if err := riverMigrate(ctx, driver); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, driver, nil
}
