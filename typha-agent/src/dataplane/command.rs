//! Running the helper programs (`iptables-restore`, `ipset`, ...): input written while output
//! is read, a deadline, and failures that name the program and the input line it refused.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::error::DataplaneError;

/// How long a helper program may run before it is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Cap on the helper output kept in an error message.
pub(super) const MAX_MESSAGE: usize = 2048;

/// Runs `prefix... program args...`, writing `input` to its stdin (concurrently with reading
/// its output, so a large input cannot deadlock), and returns its stdout.
///
/// # Errors
///
/// Each naming `program`: [`DataplaneError::Command`] when it exits with failure, the message
/// being its stderr, trimmed, with the input line it complains about (`line N`) appended,
/// capped at about 2 KB; [`DataplaneError::Run`] when it cannot start, be fed its input or
/// waited for; [`DataplaneError::Timeout`] after [`COMMAND_TIMEOUT`].
pub(super) async fn run_command(
    prefix: &[String],
    program: &str,
    args: &[&str],
    input: Option<&[u8]>,
) -> Result<Vec<u8>, DataplaneError> {
    let run_failed = |what: String, source| DataplaneError::Run {
        program: program.to_owned(),
        what,
        source,
    };
    let (exe, pre_args) = match prefix.split_first() {
        Some((exe, rest)) => (exe.as_str(), rest),
        None => (program, &[][..]),
    };
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(pre_args);
    if !prefix.is_empty() {
        cmd.arg(program);
    }
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| run_failed(format!("cannot run {exe}"), e))?;
    let stdin = child.stdin.take();
    let write = async move {
        if let (Some(mut pipe), Some(data)) = (stdin, input) {
            pipe.write_all(data).await?;
            pipe.shutdown().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let both = async { tokio::join!(write, child.wait_with_output()) };
    let (written, output) = tokio::time::timeout(COMMAND_TIMEOUT, both)
        .await
        .map_err(|_| DataplaneError::Timeout {
            program: program.to_owned(),
            limit: COMMAND_TIMEOUT,
        })?;
    let output = output.map_err(|e| run_failed(format!("waiting for {exe}"), e))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let mut message = stderr.trim().to_owned();
        if message.is_empty() {
            message = format!("exited with {}", output.status);
        }
        if let Some(text) = input.map(String::from_utf8_lossy)
            && let Some(n) = failed_line(&message)
            && let Some(line) = n.checked_sub(1).and_then(|i| text.lines().nth(i))
        {
            let line: String = line.chars().take(300).collect();
            message.push_str(&format!(" (input line {n}: {line})"));
        }
        return Err(DataplaneError::Command {
            program: program.to_owned(),
            message: cap(message),
        });
    }
    written.map_err(|e| run_failed("writing to stdin".to_owned(), e))?;
    Ok(output.stdout)
}

/// The input line a restore program complains about: the number after the first `line`
/// (`Error in line 2:`, `line 5 failed`, `Error occurred at line: 7`).
pub(super) fn failed_line(message: &str) -> Option<usize> {
    message.match_indices("line").find_map(|(i, word)| {
        let rest = message.get(i + word.len()..)?;
        let digits: String = rest
            .trim_start_matches([' ', ':'])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// Cuts a message to [`MAX_MESSAGE`] bytes, on a character boundary.
pub(super) fn cap(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}
