//! CRD kinds that are not installed: listing them, noticing, and asking again until they are
//! (see the parent module, "CRDs that are not installed").

use super::*;

impl Kubernetes {
    /// The events of a source whose CRD is not installed: nothing, asked for again every
    /// `crd_poll`; once the CRD answers, every object it lists as Added, a bookmark at the
    /// list's revision (which makes the source count in the safe revision), then its watch.
    pub(super) fn poll_missing(&self, i: usize, s: &Source) -> Events {
        enum State {
            Waiting,
            Watching(Events),
            Done,
        }
        let api = self.api(s);
        let source = s.clone();
        let missing = self.missing.clone();
        let (poll, page_size) = (self.crd_poll, self.page_size);
        let wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        stream::unfold(State::Waiting, move |state| {
            let (api, source, missing, wp) = (api.clone(), source.clone(), missing.clone(), wp.clone());
            async move {
                match state {
                    State::Done => None,
                    State::Watching(mut events) => {
                        let ev = events.next().await?;
                        Some((vec![ev], State::Watching(events)))
                    }
                    State::Waiting => loop {
                        tokio::time::sleep(poll).await;
                        match list_objects(&api, &source, page_size, Some).await {
                            Err(Listed::NotInstalled) => continue,
                            Err(Listed::Failed(e)) => {
                                debug!(source = %source.name(), error = %e, "asking for a missing CRD failed");
                                continue;
                            }
                            Ok((objects, rv)) => {
                                found(&missing, i, &source);
                                let mut out: Vec<_> =
                                    objects.into_iter().map(|o| Ok(KubeEvent::Added(o))).collect();
                                out.push(Ok(KubeEvent::Bookmark(Bookmark {
                                    types: Default::default(),
                                    metadata: BookmarkMeta {
                                        resource_version: rv.to_string(),
                                        annotations: Default::default(),
                                    },
                                })));
                                let next = match api.watch(&wp, &rv.to_string()).await {
                                    Ok(events) => State::Watching(events.boxed()),
                                    Err(e) => {
                                        out.push(Err(e));
                                        State::Done
                                    }
                                };
                                return Some((out, next));
                            }
                        }
                    },
                }
            }
        })
        .flat_map(stream::iter)
        .boxed()
    }
}

/// Why a source's list has no objects to give.
pub(super) enum Listed {
    /// Its CRD is not installed (404).
    NotInstalled,
    /// Anything else.
    Failed(DatastoreError),
}

/// Every object of one source as `keep` makes it (`None`: left out), and the list's
/// resourceVersion. Pages after the first are served at the first one's resourceVersion: one
/// consistent list per type. Each page is kept as it arrives, so only one page of whole
/// objects is held at a time: a Pod as a `DynamicObject` is about 22 KB, and a list of
/// 96,745 held whole took the server to 2.4 GiB (BENCHMARKS.md, "Memory").
pub(super) async fn list_objects<T>(
    api: &Api<DynamicObject>,
    s: &Source,
    page_size: u32,
    mut keep: impl FnMut(DynamicObject) -> Option<T>,
) -> Result<(Vec<T>, u64), Listed> {
    let mut params = ListParams::default().limit(page_size);
    let mut rv = None;
    let mut objects = Vec::new();
    loop {
        let page = match deadline("list", s, api.list(&params))
            .await
            .map_err(Listed::Failed)?
        {
            Ok(page) => page,
            Err(kube::Error::Api(st)) if st.code == 404 && s.conversion.optional() => {
                return Err(Listed::NotInstalled);
            }
            Err(e) => return Err(Listed::Failed(error(e, Revision(0), "list", s))),
        };
        if rv.is_none() {
            let v = page.metadata.resource_version.as_deref().unwrap_or("");
            rv = Some(parse_rv(v).map_err(Listed::Failed)?);
        }
        objects.extend(page.items.into_iter().filter_map(&mut keep));
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => params = params.continue_token(token),
            _ => break,
        }
    }
    Ok((objects, rv.unwrap_or(0)))
}

/// Source `i`'s CRD is not installed: said once at warn, until it is found.
pub(super) fn not_installed(missing: &Mutex<Vec<bool>>, i: usize, s: &Source, poll: Duration) {
    let mut m = missing.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(flag) = m.get_mut(i)
        && !*flag
    {
        *flag = true;
        warn!(
            crd = %s.name(),
            "kubernetes API: the CRD {} is not installed; serving no objects of this kind and asking again every {} s",
            s.name(),
            poll.as_secs_f64()
        );
    }
}

/// Source `i` answered: if its CRD had been missing, say it is back.
pub(super) fn found(missing: &Mutex<Vec<bool>>, i: usize, s: &Source) {
    let mut m = missing.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(flag) = m.get_mut(i)
        && *flag
    {
        *flag = false;
        info!(crd = %s.name(), "kubernetes API: the CRD {} is installed now; reading it", s.name());
    }
}
