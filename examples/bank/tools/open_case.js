/// <reference path="../../../sandbox/tally.d.ts" />
// Open a case for operations: recorded on the account, so it rolls back with the call.

function run(event) {
  const { account_id, note } = event.data;
  if (note.toLowerCase().includes('test outage')) fail('the case system is unavailable', 'Open the case by hand.');
  const account = graphql('query($id: UUID!) { account(id: $id) { metadata } }', { id: account_id }).account;
  const metadata = Object.assign({}, account.metadata, { case: { note, opened_by: event.caller.principal } });
  graphql('mutation($id: UUID!, $m: JSON) { updateAccount(id: $id, input: {metadata: $m}) { version } }', {
    id: account_id,
    m: metadata,
  });
  return { case_opened: true };
}
