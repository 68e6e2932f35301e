//! # tse — Task Scheduler Engine and event queues (DAOS's TSE/EQ model)
//!
//! Owns: schedulers, tasks with dependencies, prepare and completion callbacks,
//! and event queues through which any asynchronous dpustack call runs blocking
//! (no event) or non-blocking (with an event).
//!
//! Depends on nothing inside dpustack. No hidden threads: whoever calls
//! `progress` runs the tasks.
