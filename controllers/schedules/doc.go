// Package schedules is the AgentRunSchedule reconciler: it creates a
// schedule's runs at their times under its concurrency policy, trims its
// history of finished runs, and reports bad schedules and templates as
// conditions (docs/scheduling.md). Parsing schedules and naming their runs
// is internal/schedule's; this package only reads and writes objects.
package schedules
