//! Step (d): the child's own user namespace and its unprivileged ids, in the order the kernel
//! needs:
//!
//! 1. `setgroups(0)` while still the host's root: after the zygote writes `deny` to the child's
//!    `setgroups` file the list can never be changed again, and a supplementary group inherited
//!    from the zygote (root's group 0) would still open the host's group-readable files;
//! 2. `unshare(CLONE_NEWUSER)`: the mount, network, IPC, UTS and pid namespaces made before stay
//!    owned by the host's user namespace, where the child now holds no capability;
//! 3. `U` to the zygote, then wait for `G`: it writes `setgroups` (`deny`), `uid_map` and
//!    `gid_map` (`1000 <uid> 1`) meanwhile (the cgroups it wrote before, right after the fork);
//! 4. `setresgid(1000)`, the capability bounding set emptied (while `CAP_SETPCAP` is still
//!    held), `setresuid(1000)`;
//! 5. `capset` to empty sets. Needed: the kernel clears capabilities on `setresuid` only when the
//!    process was uid 0 *of its namespace* before, and uid 0 is not mapped in this one, so the
//!    child would keep every capability of its user namespace (measured: CapEff stayed
//!    `000001ffffffffff`);
//! 6. `PR_SET_DUMPABLE` 1, which the uid change reset to 0 (that made `/proc/1/*` belong to the
//!    host's root, so the session could not read its own `/proc/self/environ` or `fd`);
//! 7. the parent-death signal set again (the id change cleared it), then a check that the zygote
//!    still holds its end of the release pipe: had it died in between, no signal would come.

use std::time::{Duration, Instant};

use crate::channel::ChildChannel;
use crate::error::HardenError;
use crate::spec::SESSION_ID_INSIDE;
use crate::sys;

/// Step (d). Returns how long the child waited for the zygote.
pub(crate) fn enter_user_namespace(channel: &mut ChildChannel) -> Result<Duration, HardenError> {
    let failed = |call: &'static str| move |source| HardenError::Identity { call, source };
    let death_signal = sys::parent_death_signal().map_err(failed("PR_GET_PDEATHSIG"))?;
    sys::clear_supplementary_groups().map_err(failed("setgroups"))?;
    sys::unshare(libc::CLONE_NEWUSER).map_err(failed("unshare(CLONE_NEWUSER)"))?;

    let waiting = Instant::now();
    channel
        .unshared()
        .map_err(|error| HardenError::Admission(format!("writing the status pipe: {error}")))?;
    channel.wait_release().map_err(HardenError::Admission)?;
    let admission = waiting.elapsed();

    sys::set_all_gids(SESSION_ID_INSIDE).map_err(failed("setresgid"))?;
    sys::drop_bounding_set().map_err(failed("PR_CAPBSET_DROP"))?;
    sys::set_all_uids(SESSION_ID_INSIDE).map_err(failed("setresuid"))?;
    sys::clear_capabilities().map_err(failed("capset"))?;
    sys::set_dumpable().map_err(failed("PR_SET_DUMPABLE"))?;
    if death_signal != 0 {
        sys::set_parent_death_signal(death_signal).map_err(failed("PR_SET_PDEATHSIG"))?;
        let alive = channel.zygote_alive().map_err(|error| {
            HardenError::Admission(format!("polling the release pipe: {error}"))
        })?;
        if !alive {
            return Err(HardenError::Admission(
                "the zygote ended before the parent-death signal was set again".to_owned(),
            ));
        }
    }
    Ok(admission)
}
