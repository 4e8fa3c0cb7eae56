//! [`SandboxManager`] as the sandbox seam ([`SandboxSessions`]), and its errors in the seam's terms:
//! what the caller may read, and what only the log may.

use std::time::Duration;

use async_trait::async_trait;
use toolgate_sandbox::{
    RunOutcome, RunRequest, SandboxSessions, SandboxSessionsError, WorkspaceRead,
};

use crate::manager::SandboxManager;
use crate::manager_types::ManagerError;

#[async_trait]
impl SandboxSessions for SandboxManager {
    async fn run(&self, request: RunRequest) -> Result<RunOutcome, SandboxSessionsError> {
        SandboxManager::run(self, request).await.map_err(Into::into)
    }

    async fn read_file(
        &self,
        account: &str,
        session_id: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<WorkspaceRead, SandboxSessionsError> {
        SandboxManager::read_file(self, account, session_id, path, max_bytes)
            .await
            .map_err(Into::into)
    }

    async fn close(&self, account: &str, session_id: &str) -> bool {
        self.close_session(account, session_id).await
    }

    async fn list(&self, account: &str) -> Vec<toolgate_sandbox::SandboxSessionInfo> {
        self.sessions_of(account).await
    }

    fn idle_ttl(&self) -> Duration {
        SandboxManager::idle_ttl(self)
    }
}

impl From<ManagerError> for SandboxSessionsError {
    fn from(error: ManagerError) -> Self {
        match error {
            // the caller's to act on: a limit, a bad request, a missing session
            ManagerError::TooManySessions { .. }
            | ManagerError::AtCapacity { .. }
            | ManagerError::AccountBudget { .. }
            | ManagerError::InvalidSessionId
            | ManagerError::InvalidAccount
            | ManagerError::InvalidEnv(_)
            | ManagerError::NoSuchSession
            | ManagerError::TooManyFiles { .. }
            | ManagerError::UploadTooLarge { .. }
            | ManagerError::File(_)
            | ManagerError::NoFreeUid(_) => Self::Refused(error.to_string()),
            // the run's own end: killed, out of memory, died (the message says which)
            ManagerError::Session(_) => Self::Failed(error.to_string()),
            // the sandbox's own trouble: internals (host paths, errno) go to the log only
            ManagerError::Cgroup(_)
            | ManagerError::Zygote(_)
            | ManagerError::Egress(_)
            | ManagerError::Workspace { .. }
            | ManagerError::ShutDown => Self::Unavailable(Box::new(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn internals_never_reach_the_callers_message() {
        let workspace = ManagerError::Workspace {
            path: PathBuf::from("/var/lib/toolgate/sessions/secret-host-path"),
            source: std::io::Error::other("EACCES"),
        };
        let seam = SandboxSessionsError::from(workspace);
        assert!(matches!(seam, SandboxSessionsError::Unavailable(_)));
        assert!(!seam.to_string().contains("secret-host-path"), "{seam}");
        // the log still gets the whole story
        let source = std::error::Error::source(&seam).map(ToString::to_string);
        assert!(source.is_some_and(|s| s.contains("secret-host-path")));
        let limit = SandboxSessionsError::from(ManagerError::NoSuchSession);
        assert!(
            matches!(limit, SandboxSessionsError::Refused(ref m) if m.contains("no such session"))
        );
    }
}
