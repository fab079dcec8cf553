//! New programs: exec replaces this process (its cache goes with it, exit handlers unrun), and
//! posix_spawn, system and popen start a child without fork's handlers. Each writes every
//! cached file back first, so the new program reads the files as this one left them (data
//! written before an exec survives it in the kernel too).
//!
//! The variadic execl, execlp and execle (glibc's call its internal execve, unseen) are
//! trampolines in assembly on x86-64: stable Rust can neither receive nor forward a variadic
//! list, so they save the argument registers, write back, restore them and jump to libc's
//! function, leaving the stack (and any arguments on it) as the caller made it. So is
//! `dprintf` (`bypass.rs`).

use crate::guard;
use crate::real;
use crate::shim;
use libc::{c_char, c_int, pid_t, posix_spawn_file_actions_t, posix_spawnattr_t, FILE};

fn write_back_everything() {
    let Some(_inside) = guard::enter() else { return };
    if let Some(shim) = shim::current() {
        shim.write_back_all("before starting a program", "the new program reads the file without it");
    }
}

/// Functions that start a program: each writes every cached file back, then calls libc's.
macro_rules! written_back_first {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            write_back_everything();
            // SAFETY: the caller's arguments, as this function's C prototype has them, passed
            // on unchanged; the shim reads none of them.
            unsafe { real::$name()($($arg),*) }
        }
    )*};
}

type Argv = *const *const c_char;
type SpawnArgv = *const *mut c_char;

written_back_first! {
    execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int;
    execv(path: *const c_char, argv: Argv) -> c_int;
    execvp(file: *const c_char, argv: Argv) -> c_int;
    execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int;
    fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int;
    posix_spawn(
        pid: *mut pid_t,
        path: *const c_char,
        actions: *const posix_spawn_file_actions_t,
        attr: *const posix_spawnattr_t,
        argv: SpawnArgv,
        envp: SpawnArgv
    ) -> c_int;
    posix_spawnp(
        pid: *mut pid_t,
        file: *const c_char,
        actions: *const posix_spawn_file_actions_t,
        attr: *const posix_spawnattr_t,
        argv: SpawnArgv,
        envp: SpawnArgv
    ) -> c_int;
    system(command: *const c_char) -> c_int;
    popen(command: *const c_char, mode: *const c_char) -> *mut FILE;
}

/// Called by the trampolines: must not unwind into assembly.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
extern "C" fn before_exec() {
    let _ = std::panic::catch_unwind(write_back_everything);
}

/// Jumps to libc's function after calling a hook with the caller's first argument (the
/// argument registers, %al and xmm0-7, which a variadic call may pass doubles in, are saved
/// around the hook).
macro_rules! trampolines {
    ($($name:ident => $target:ident via $before:path;)*) => {$(
        /// libc's address of the function, for the trampoline's jump.
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        extern "C" fn $target() -> usize {
            real::$name() as usize
        }

        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            // 7 pushes and 128 bytes from the entry's rsp = 8 (mod 16) align the calls.
            core::arch::naked_asm!(
                "push rdi", "push rsi", "push rdx", "push rcx", "push r8", "push r9", "push rax",
                "sub rsp, 128",
                "movdqu [rsp], xmm0", "movdqu [rsp + 16], xmm1", "movdqu [rsp + 32], xmm2",
                "movdqu [rsp + 48], xmm3", "movdqu [rsp + 64], xmm4", "movdqu [rsp + 80], xmm5",
                "movdqu [rsp + 96], xmm6", "movdqu [rsp + 112], xmm7",
                "call {before}",
                "call {target}",
                "mov r11, rax",
                "movdqu xmm0, [rsp]", "movdqu xmm1, [rsp + 16]", "movdqu xmm2, [rsp + 32]",
                "movdqu xmm3, [rsp + 48]", "movdqu xmm4, [rsp + 64]", "movdqu xmm5, [rsp + 80]",
                "movdqu xmm6, [rsp + 96]", "movdqu xmm7, [rsp + 112]",
                "add rsp, 128",
                "pop rax", "pop r9", "pop r8", "pop rcx", "pop rdx", "pop rsi", "pop rdi",
                "jmp r11",
                before = sym $before,
                target = sym $target,
            )
        }
    )*};
}

trampolines! {
    execl => real_execl via before_exec;
    execlp => real_execlp via before_exec;
    execle => real_execle via before_exec;
    dprintf => real_dprintf via crate::bypass::before_dprintf;
}
