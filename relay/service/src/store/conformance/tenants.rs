//! One owner's reads: the store filters by owner in its query, so a caller cannot forget the
//! filter and the cost of a read follows the owner's own objects, not every tenant's.

use super::{T0, at};
use crate::store::{ProjectRecord, Store};

async fn project(store: &dyn Store, owner_id: &str, name: &str, created: i64) -> ProjectRecord {
    let project = ProjectRecord {
        id: uuid::Uuid::new_v4().to_string(),
        owner_id: owner_id.to_owned(),
        name: name.into(),
        created_at: at(created),
    };
    store
        .insert_project(project.clone())
        .await
        .expect("insert project");
    project
}

/// An owner's projects list oldest first (ties by id) and never another owner's; an owner
/// with none, or an unknown one, lists none.
pub async fn projects_are_listed_per_owner(store: &dyn Store) {
    let ann = store.ensure_owner("ann", T0).await.expect("ensure owner");
    let bob = store.ensure_owner("bob", T0).await.expect("ensure owner");
    let cid = store.ensure_owner("cid", T0).await.expect("ensure owner");
    let ann_late = project(store, &ann.id, "late", 9).await;
    let bob_only = project(store, &bob.id, "bob's", 5).await;
    let ann_early = project(store, &ann.id, "early", 2).await;
    let mut tied = vec![
        project(store, &ann.id, "tie-1", 4).await,
        project(store, &ann.id, "tie-2", 4).await,
    ];
    tied.sort_by(|a, b| a.id.cmp(&b.id));
    let mut expected = vec![ann_early];
    expected.extend(tied);
    expected.push(ann_late);
    assert_eq!(
        store.projects_of_owner(&ann.id).await.expect("list"),
        expected,
        "an owner's projects, oldest first, ties by id, and only theirs"
    );
    assert_eq!(
        store.projects_of_owner(&bob.id).await.expect("list"),
        [bob_only]
    );
    assert!(
        store
            .projects_of_owner(&cid.id)
            .await
            .expect("list")
            .is_empty()
    );
    assert!(
        store
            .projects_of_owner("no-such-owner")
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(
        store.all_projects().await.expect("list all").len(),
        5,
        "the operator's listing still has every owner's"
    );
}

/// One project is read for its owner only: another owner's project reads as missing, the
/// same answer as an unknown id.
pub async fn a_project_is_read_for_its_owner_only(store: &dyn Store) {
    let ann = store.ensure_owner("ann", T0).await.expect("ensure owner");
    let bob = store.ensure_owner("bob", T0).await.expect("ensure owner");
    let anns = project(store, &ann.id, "ann's", 1).await;
    let bobs = project(store, &bob.id, "bob's", 1).await;
    assert_eq!(
        store
            .project_of_owner(&ann.id, &anns.id)
            .await
            .expect("read"),
        Some(anns.clone())
    );
    assert_eq!(
        store
            .project_of_owner(&bob.id, &bobs.id)
            .await
            .expect("read"),
        Some(bobs.clone())
    );
    for (owner, id) in [
        (&ann.id, &bobs.id),
        (&bob.id, &anns.id),
        (&ann.id, &"nope".to_owned()),
    ] {
        assert_eq!(
            store.project_of_owner(owner, id).await.expect("read"),
            None,
            "project {id} must read as missing for owner {owner}"
        );
    }
    assert_eq!(
        store
            .project_of_owner("no-such-owner", &anns.id)
            .await
            .expect("read"),
        None
    );
}
