/// <reference path="../../../sandbox/tally.d.ts" />
// payout's follow-up when the provider refused it for good: void the hold, and the money the payout
// held is the customer's to spend again.

function run(event) {
  const { payout_id, why } = event.data;
  const voided = graphql('mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }', { id: payout_id });
  return { payout_id, released: voided.voidTransaction.transactionId, why };
}
