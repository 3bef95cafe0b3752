//! Unit tests of the wire formats, on fixtures in the APIs' real wire format.

mod api;
mod assemble;
mod fixtures;
mod request;
mod response;
mod restore;
mod restore_sse;
mod sse;
