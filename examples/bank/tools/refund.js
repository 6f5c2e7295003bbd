/// <reference path="../../../sandbox/tally.d.ts" />
// Refund a transfer by voiding it: every entry reversed, balances restored exactly.

function run(event) {
  const voided = graphql('mutation($id: UUID!) { voidTransaction(id: $id) { transactionId voidOf } }', {
    id: event.data.transaction_id,
  });
  return { refund_id: voided.voidTransaction.transactionId, refunded: voided.voidTransaction.voidOf };
}
