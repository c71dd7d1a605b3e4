//! The process's allocator: mimalloc, tuned per command.
//!
//! Design rules:
//! - **One allocator for the whole process**, chosen at link time
//!   (`#[global_allocator]`): memory is never freed by an allocator that
//!   did not hand it out.
//! - **No transparent huge pages.** A fresh huge page is 2 MiB the kernel
//!   zeroes on first touch, used or not: with them, zeroing was 30 % of a
//!   1 GB `diagnose`'s CPU (`perf`: `clear_page_erms` under mimalloc's
//!   fresh pages), and a freed burst stays resident in 2 MiB pieces.
//! - **Offline commands keep what they free for a while.** `diagnose`
//!   (and `advise`, `whatif`) free and allocate partition buffers all run
//!   long; memory handed back to the kernel must be zeroed again on the
//!   next touch. [`for_offline`] delays purging by a second (10 ms by
//!   default); the memory limit bounds what is allocated, so this keeps
//!   at most what the limit allows. glibc's malloc/free took a quarter of
//!   the CPU besides: mimalloc's thread-local free lists cut that.
//! - **`serve` hands memory back at once** ([`for_serve`]): its RSS under
//!   overload is what its operators size for and what the overload tests
//!   bound.
//!
//! Measured on the 1 GB bench set (2 vCPU VM, alternating runs): glibc
//! 22–36 s; mimalloc as shipped by default 16–20 s; with no huge pages
//! and the one-second purge delay 12.8–13.2 s (docs/diagnose-at-scale.md).

/// mimalloc rather than the system allocator (see the module header).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc v3's option numbers (`mi_option_t` in its mimalloc.h); the
// bindings' constants name only the v2 ones that kept their number.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const ARENA_PURGE_MULT: libmimalloc_sys::mi_option_t = 24;

/// Tunes the allocator for an offline run: freed memory is kept a second
/// before it goes back to the kernel. Call first thing, before threads.
pub fn for_offline() {
    no_huge_pages();
    // SAFETY: sets an allocator option; not thread-safe, hence called
    // before the command starts any thread.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 1000) };
}

/// Tunes the allocator for a long-running collector: freed memory goes
/// back to the kernel at once. Call first thing, before threads start.
pub fn for_serve() {
    no_huge_pages();
    // SAFETY: sets allocator options; not thread-safe, hence called
    // before `serve` starts its runtime.
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
        libmimalloc_sys::mi_option_set(ARENA_PURGE_MULT, 1);
    }
}

/// Turns transparent huge pages off for this process, whatever the
/// system's setting (mimalloc asks for them on its arenas otherwise).
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_THP_DISABLE only sets a flag on this
    // process; a failure (an old kernel) leaves the default, harmlessly.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
