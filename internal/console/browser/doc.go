// Package browser holds the web console's browser tests: a real headless
// Chromium (driven with chromedp) against the console, a real API server
// and a running manager. They live apart so that their cost stays out of
// the console package's own tests.
package browser
