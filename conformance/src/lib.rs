//! Upstream VPA's conformance vectors evaluated through the functions Tailor ships, with the test doubles
//! those vectors name (a fake priority processor, mocked restriction answers, fake resize calculators). The
//! `tailor` CLI's `--case` modes print what each vector gives, and this crate's tests compare that with the
//! vectors' expectations; no daemon links this crate, so none of the doubles ships in one.

pub mod updater;
