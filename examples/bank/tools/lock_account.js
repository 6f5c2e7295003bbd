/// <reference path="../../../sandbox/tally.d.ts" />
// Lock an account so it blocks posting, and open a case for operations. Locking is the point of
// the call, so a failure there fails it; the case is secondary, so its failure is handled here.

function run(event) {
  const data = event.data;
  graphql('mutation Lock($id: UUID!) { updateAccount(id: $id, input: {status: LOCKED}) { accountId } }', {
    id: data.account_id,
  });
  const c = tools.open_case({ account_id: data.account_id, note: data.reason }, { check: false });
  return { locked: true, case_opened: c.ok };
}
