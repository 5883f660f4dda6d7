// Package importrules has no code: its test enforces the import rules of docs/DESIGN.md ("Imports
// point one way") over every package of the module, from `go list`.
package importrules
