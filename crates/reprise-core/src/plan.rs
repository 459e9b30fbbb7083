//! Plans: being written (run-engine issue).
