// Package consolebrowser holds the web console's browser tests: a real
// headless Chromium (driven with chromedp) against the console, a real API
// server and a running manager, and for the history pages the history API
// served behind the API server's aggregation layer
// (internal/history/historytest). They live in the test module so that
// chromedp stays out of the operator's go.mod, and their cost out of the
// console package's own tests.
package consolebrowser
