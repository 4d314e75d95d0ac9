package demo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/twicejobs/twice"
)

// WatermarkImage asks for an ad image to be watermarked.
type WatermarkImage struct {
	ImageID int64 `json:"image_id"`
}

// Kind names the message.
func (WatermarkImage) Kind() string { return "ads.image-watermark.v1" }

// watermarkHeader starts every watermarked object; it names the image, so
// the checker can tell which image an object belongs to.
const watermarkHeader = "twice-demo watermark; image="

// watermark writes the watermarked image to a content-addressed path: the
// same image always yields the same bytes and so the same object, and a
// second run overwrites it. That makes the effect idempotent by itself
// (the None strategy: no marker needed).
func (a *App) watermark(ctx context.Context, job *twice.Job[WatermarkImage]) error {
	var source []byte
	err := a.db.QueryRowContext(ctx, a.q(`SELECT source FROM demo_images WHERE id = $1`), job.Args.ImageID).Scan(&source)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return twice.NoOp("image deleted")
	case err != nil:
		return fmt.Errorf("load image %d: %w", job.Args.ImageID, err)
	}
	content := watermarked(job.Args.ImageID, source)
	if a.nonIdempotentWatermark {
		// The classic mistake: a per-run stamp makes every run a new object.
		content = append(content, []byte("\nrendered at "+time.Now().Format(time.RFC3339Nano))...)
	}
	key, err := a.putObject(content)
	if err != nil {
		return fmt.Errorf("write watermarked image %d: %w", job.Args.ImageID, err)
	}
	if _, err := a.db.ExecContext(ctx, a.q(`UPDATE demo_images SET object_key = $1 WHERE id = $2`), key, job.Args.ImageID); err != nil {
		return fmt.Errorf("record object of image %d: %w", job.Args.ImageID, err)
	}
	twice.Logger(ctx).InfoContext(ctx, "image watermarked", "image_id", job.Args.ImageID, "object", key)
	return nil
}

// watermarked is the deterministic watermark of an image.
func watermarked(imageID int64, source []byte) []byte {
	var b bytes.Buffer
	b.WriteString(watermarkHeader + strconv.FormatInt(imageID, 10) + "\n")
	b.Write(source)
	return b.Bytes()
}

// objectKey is the content address of an object: its sha256, as a path
// with a two-character fan-out directory.
func objectKey(content []byte) string {
	sum := sha256.Sum256(content)
	h := hex.EncodeToString(sum[:])
	return h[:2] + "/" + h + ".img"
}

// putObject writes content at its content address, atomically: a temporary
// file renamed over the object, so a crash never leaves half an object and
// concurrent writers of the same content agree.
func (a *App) putObject(content []byte) (string, error) {
	key := objectKey(content)
	path := filepath.Join(a.objects, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; cleans up on failure
	if _, err := tmp.Write(content); err != nil {
		_ = tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return key, nil
}
